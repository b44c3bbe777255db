// The full-screen chat's ways out to other programs: composing a message in the user's editor
// (Ctrl-X Ctrl-E) and /copy to the system clipboard.
#include <algorithm>

#include "ui/io/clipboard.h"
#include "ui/tui/app_impl.h"
#include "ui/tui/editor.h"

namespace ember::ui {

void FullScreen::Impl::compose_in_editor() {
    if (job != JobKind::None) {
        show_message("a reply is being written: Esc or Ctrl-C stops it, then Ctrl-X Ctrl-E", false);
        return;
    }
    const std::string command = tui::editor_command();
    if (command.empty()) {
        show_message("Ctrl-X Ctrl-E: no editor; set $EDITOR (or $VISUAL) to compose in one", true);
        return;
    }
    screen->suspend();
    tui::EditorOutcome outcome = tui::edit_text(command, input.text());
    screen->resume();
    dirty = true;
    if (!outcome.text) {
        show_message(outcome.error, true);
        return;
    }
    input.set_text(std::move(*outcome.text));
    show_message("from your editor: Enter sends it", false);
}

void FullScreen::Impl::copy_reply(const std::string& args) {
    if (job != JobKind::None) {
        show_message("a reply is being written: /copy once it is done", false);
        return;
    }
    const auto& messages = controller->engine().messages();
    const auto last = std::find_if(messages.rbegin(), messages.rend(),
                                   [](const ChatMessage& m) { return m.role == "assistant"; });
    if (last == messages.rend()) {
        show_message("/copy: there is no reply to copy yet", true);
        return;
    }
    std::string error;
    const std::optional<std::string> text = copy_selection(last->content, args, error);
    if (!text) {
        show_message(error, true);
        return;
    }
    const std::string what = args.empty() ? "the last reply" : "code block " + args;
    const ClipboardResult result = copy_to_clipboard(*text);
    if (result.via_tool) {
        show_message(
            "copied " + what + " (" + std::to_string(text->size()) + " bytes) with " + result.tool,
            false);
        return;
    }
    // No tool took it: the terminal is asked (OSC 52), and whether it did cannot be known,
    // so the message says what was done, not that it was copied.
    if (const std::string blocker = osc52_blocker(); !blocker.empty()) {
        show_message(
            "/copy: nothing copied: no clipboard tool (wl-copy, xclip, xsel, pbcopy) "
            "and " +
                blocker,
            true);
        return;
    }
    screen->write_raw(result.osc52);
    show_message("sent " + what + " (" + std::to_string(text->size()) +
                     " bytes) to the terminal's clipboard (OSC 52; no clipboard tool found): "
                     "it is there if the terminal allows OSC 52",
                 false);
}

}  // namespace ember::ui
