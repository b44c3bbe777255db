// The full-screen chat's ways out to other programs: composing a message in the user's editor
// (Ctrl-X Ctrl-E) and /copy to the system clipboard; and /preset, the config file's presets.
#include <algorithm>

#include "ui/clipboard.h"
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
    screen->write_raw(result.osc52);
    show_message("copied " + what + " (" + std::to_string(text->size()) +
                     " bytes) through the terminal (OSC 52: no clipboard tool found)",
                 false);
}

void FullScreen::Impl::apply_preset(const std::string& name) {
    if (job != JobKind::None) {
        show_message("a reply is being written: /preset once it is done", false);
        return;
    }
    if (name.empty()) {
        std::string names;
        for (const auto& [n, p] : options.presets) names += (names.empty() ? "" : ", ") + n;
        show_message(names.empty() ? "/preset: no presets in " + options.config_path
                                   : "/preset NAME: " + names,
                     names.empty());
        return;
    }
    try {
        const Preset& preset = find_preset(options.presets, name, options.config_path);
        std::string applied;
        for (const std::string& command : preset_commands(preset)) {
            const ChatOutcome outcome = controller->handle_command(
                command, [](const std::string&, TextKind) { return true; });
            if (outcome.error) {
                show_message("/preset " + name + ": " + outcome.message, true);
                return;
            }
            const std::string what =
                command.starts_with("/system") ? "system prompt" : command.substr(5);
            applied += (applied.empty() ? "" : ", ") + what;
        }
        show_message("preset " + name + ": " + (applied.empty() ? "nothing to set" : applied),
                     false);
    } catch (const std::exception& e) {
        show_message(std::string("/preset: ") + e.what(), true);
    }
}

}  // namespace ember::ui
