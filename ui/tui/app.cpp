#include <fcntl.h>
#include <langinfo.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "ui/tui/app_impl.h"

namespace ember::ui {

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// At most ~60 frames a second: a reply streaming hundreds of tokens a second is drawn once
// per frame, not once per token.
constexpr auto kFrameInterval = 16ms;
// After a lone ESC byte, how long to wait for the rest of an escape sequence.
constexpr auto kEscapeWait = 30ms;
constexpr auto kMessageTime = 5s;
// While a job runs the status line repaints on its own this often (its elapsed time, a
// prompt's progress), keys or no keys.
constexpr auto kBusyRepaint = 200ms;
// A second Ctrl-C on an empty input within this time leaves.
constexpr auto kDoubleCtrlC = 1s;
constexpr int kWheelRows = 3;
constexpr int64_t kSessionLimit = 50;
constexpr size_t kHistoryLimit = 1000;

const char* const kKeysHelp =
    "Keys:\n"
    "  Enter sends · Alt-Enter (or Shift-Enter, Ctrl-J) starts a new line · pasting keeps "
    "newlines\n"
    "  Up/Down: earlier prompts · Tab completes commands, session ids and model names\n"
    "  Ctrl-A/E, Home/End: line start/end · Ctrl-K/U: delete to end/start · Ctrl-W: delete word"
    "\n"
    "  Ctrl-Left/Right, Alt-B/F: word moves\n"
    "  PgUp/PgDn, mouse wheel: scroll · Ctrl-Home/End (Home/End on an empty input): top/bottom\n"
    "  Ctrl-T: show or hide thinking · Ctrl-O or F2: sessions · Ctrl-L: redraw\n"
    "  Ctrl-X Ctrl-E: write the message in $EDITOR\n"
    "  Esc or Ctrl-C: stop the reply (or the reading of a long prompt), or answer no to a [y/N] "
    "question · Ctrl-D, /quit (or "
    "Ctrl-C twice on an empty input): leave\n"
    "  /edit alone puts your last prompt in the input box to change and resend";

void ensure_utf8_locale() {
    // Curses draws wide and combining characters only under a UTF-8 character type; the
    // model writes UTF-8 whatever the environment says.
    std::setlocale(LC_CTYPE, "");
    const char* codeset = nl_langinfo(CODESET);
    if (codeset == nullptr || std::string(codeset) != "UTF-8") {
        if (std::setlocale(LC_CTYPE, "C.UTF-8") == nullptr) {
            std::setlocale(LC_CTYPE, "en_US.UTF-8");
        }
    }
}

bool env_set(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0';
}

std::pair<std::string, std::string> split_command(const std::string& line) {
    const size_t space = line.find_first_of(" \t\n");
    if (space == std::string::npos) return {line, {}};
    const size_t rest = line.find_first_not_of(" \t\n", space);
    return {line.substr(0, space), rest == std::string::npos ? std::string() : line.substr(rest)};
}

int poll_timeout(Clock::time_point now, Clock::time_point until) {
    if (until <= now) return 0;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(until - now).count());
}

void lower_timeout(int& timeout, int candidate) {
    if (timeout < 0 || candidate < timeout) timeout = candidate;
}

}  // namespace

bool full_screen_possible() {
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return false;
    const char* term = std::getenv("TERM");
    return term != nullptr && *term != '\0' && std::string(term) != "dumb";
}

std::unique_ptr<FullScreen> FullScreen::open(const FullScreenOptions& options) {
    if (!full_screen_possible()) return nullptr;
    ensure_utf8_locale();
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->model_name = options.model_name.empty() ? fs::path(options.model_path).filename().string()
                                                  : options.model_name;
    tui::signal_flags().terminate_signal.store(0);
    tui::signal_flags().resized.store(false);
    tui::signal_flags().wake_fd.store(impl->events.wake_write_fd());
    std::string why;
    impl->screen = tui::Screen::start(options.color && !env_set("NO_COLOR"), why);
    if (!impl->screen) {
        tui::signal_flags().wake_fd.store(-1);
        return nullptr;
    }
    Impl* state = impl.get();
    impl->loader = std::thread([state] { state->loading_loop(); });
    return std::unique_ptr<FullScreen>(new FullScreen(std::move(impl)));
}

FullScreen::FullScreen(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FullScreen::~FullScreen() {
    // Normally run() has done all this; an exception (a failed model load) comes here.
    if (impl_->loader.joinable()) {
        impl_->loaded.store(true);
        impl_->events.wake();
        impl_->loader.join();
    }
    if (impl_->worker) {
        impl_->cancel.store(true);
        if (impl_->controller != nullptr) impl_->controller->request_cancel();
        impl_->worker.reset();
    }
    impl_->screen->restore();
    tui::signal_flags().wake_fd.store(-1);
}

int FullScreen::run(ChatController& controller) {
    return impl_->run(controller);
}

void FullScreen::add_notice(std::string text) {
    impl_->start_notices.push_back(std::move(text));
}

void FullScreen::set_placement(const std::string& where) {
    impl_->model_name += " · " + where;
}

void FullScreen::Impl::abort_loading(int signal_number) {
    // The model is still loading on the main thread and cannot be interrupted: give the
    // terminal back and end the way the signal (or Ctrl-C) would have without us.
    screen->restore();
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
}

void FullScreen::Impl::loading_loop() {
    auto& flags = tui::signal_flags();
    while (!loaded.load()) {
        if (const int sig = flags.terminate_signal.load()) abort_loading(sig);
        if (flags.resized.exchange(false)) screen->update_size();
        for (auto& line : screen->read_stderr()) loading_note = std::move(line);
        draw_loading();
        pollfd fds[3] = {{screen->input_fd(), POLLIN, 0},
                         {events.wake_fd(), POLLIN, 0},
                         {screen->stderr_fd(), POLLIN, 0}};
        if (poll(fds, screen->stderr_fd() >= 0 ? 3 : 2, 100) <= 0) continue;
        if (fds[1].revents & POLLIN) events.drain();
        if (fds[0].revents & POLLIN) {
            char buffer[1024];
            const ssize_t n = read(screen->input_fd(), buffer, sizeof buffer);
            if (n <= 0) continue;
            std::vector<tui::KeyEvent> typed;
            keys.feed(std::string_view(buffer, static_cast<size_t>(n)), typed);
            for (auto& key : typed) {
                const bool quits =
                    key.key == tui::Key::Control && (key.letter == 'c' || key.letter == 'd');
                if (quits) abort_loading(SIGINT);
                typed_while_loading.push_back(std::move(key));
            }
        }
    }
}

int FullScreen::Impl::run(ChatController& c) {
    loaded.store(true);
    events.wake();
    if (loader.joinable()) loader.join();
    controller = &c;
    // Called on the worker between layers: atomics the status line reads at its next repaint.
    c.set_prefill_progress([this](const PrefillProgress& p) {
        prefill_total.store(p.total, std::memory_order_relaxed);
        prefill_done.store(p.done, std::memory_order_relaxed);
        prefill_millis.store(static_cast<int64_t>(p.seconds * 1000.0), std::memory_order_relaxed);
    });
    worker = std::make_unique<tui::Worker>();
    context_total = c.engine().context_size();
    // A resumed conversation is not evaluated yet: what it takes.
    context_used = c.engine().context_needed();
    rebuild_transcript(c.engine().messages(), c.message_notes());
    try {
        sessions = c.list_sessions(kSessionLimit);
    } catch (const std::exception& e) {
        show_message(std::string("sessions: ") + e.what(), true);
    }
    session_id = c.session_id();
    // Before the worker runs anything: the controller is this thread's until then.
    if (const std::string name = c.model_name(); !name.empty()) model_name = name;
    model_names = c.model_names();
    load_history();
    if (transcript.empty()) {
        transcript.add({tui::EntryKind::Notice,
                        "ember · Enter sends · Alt-Enter adds a line · /help lists commands and "
                        "keys · Ctrl-D leaves"});
    } else {
        show_message("resumed '" + session_title() + "'", false);
    }
    for (auto& notice : start_notices) transcript.add({tui::EntryKind::Notice, std::move(notice)});
    start_notices.clear();
    // A resumed conversation's tool call that waited for the user's yes asks again.
    if (c.tool_call_waiting()) {
        const ChatOutcome question = c.waiting_call_question();
        show_message(question.message, false);
        show_tool_activity(question);
    }
    for (const auto& key : typed_while_loading) handle_key(key);
    typed_while_loading.clear();

    // Leaving, also by an exception: a reply in progress stops and is saved as far as it
    // got, and the worker is done with the controller before the caller destroys it.
    const auto leave = [&] {
        cancel.store(true);
        // A reply (or a long prompt being read) stops within a layer and is committed; its
        // state is not stored, so leaving takes no longer than that.
        c.request_leave();
        worker->finish();
        worker.reset();
        screen->restore();
        tui::signal_flags().wake_fd.store(-1);
    };
    try {
        loop();
    } catch (...) {
        leave();
        throw;
    }
    leave();
    return exit_status;
}

void FullScreen::Impl::loop() {
    auto& flags = tui::signal_flags();
    while (!quit) {
        if (const int sig = flags.terminate_signal.load()) {
            exit_status = 128 + sig;
            break;
        }
        if (flags.resized.exchange(false)) {
            screen->update_size();
            dirty = true;
        }
        for (auto& event : events.take_all()) {
            std::visit([this](auto& e) { apply(e); }, event);
            dirty = true;
        }
        for (auto& line : screen->read_stderr()) show_message(line, true);
        const auto now = Clock::now();
        if (!message.empty() && now >= message_until) {
            message.clear();
            dirty = true;
        }
        if (job != JobKind::None && now - last_frame >= kBusyRepaint) dirty = true;
        if (quit) break;
        // Keys are answered at once; streamed text waits for the next frame.
        if (dirty && (key_pressed || now - last_frame >= kFrameInterval)) {
            draw();
            last_frame = now;
            dirty = false;
            key_pressed = false;
        }
        poll_once();
    }
}

void FullScreen::Impl::poll_once() {
    const auto now = Clock::now();
    int timeout = -1;
    if (dirty) lower_timeout(timeout, poll_timeout(now, last_frame + kFrameInterval));
    if (keys.pending()) lower_timeout(timeout, static_cast<int>(kEscapeWait.count()));
    if (!message.empty()) lower_timeout(timeout, poll_timeout(now, message_until));
    // The elapsed time and a prompt's progress in the status line.
    if (job != JobKind::None) lower_timeout(timeout, poll_timeout(now, last_frame + kBusyRepaint));
    pollfd fds[3] = {{screen->input_fd(), POLLIN, 0},
                     {events.wake_fd(), POLLIN, 0},
                     {screen->stderr_fd(), POLLIN, 0}};
    const int ready = poll(fds, screen->stderr_fd() >= 0 ? 3 : 2, timeout);
    if (ready < 0) return;  // EINTR: a signal; the loop looks at the flags
    std::vector<tui::KeyEvent> typed;
    // A lone ESC is a key of its own once no sequence followed it in time, also while
    // streamed text keeps poll() from timing out: else an Enter typed later would join it
    // (ESC CR, Alt-Enter) and be lost as a newline.
    const bool escape_due = escape_since && Clock::now() - *escape_since >= kEscapeWait;
    if (keys.pending() && (ready == 0 || escape_due)) keys.flush(typed);
    if (fds[1].revents & POLLIN) events.drain();
    if (fds[0].revents & POLLIN) {
        char buffer[4096];
        const ssize_t n = read(screen->input_fd(), buffer, sizeof buffer);
        if (n > 0) {
            keys.feed(std::string_view(buffer, static_cast<size_t>(n)), typed);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            quit = true;  // the terminal went away
            exit_status = 129;
        }
    } else if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) {
        quit = true;
        exit_status = 129;
    }
    if (!keys.pending()) {
        escape_since.reset();
    } else if (!escape_since) {
        escape_since = Clock::now();
    }
    for (const auto& key : typed) handle_key(key);
    if (!typed.empty()) {
        dirty = true;
        key_pressed = true;
    }
}

void FullScreen::Impl::show_message(std::string text, bool error) {
    const size_t nl = text.find('\n');
    if (nl != std::string::npos) text.resize(nl);
    message = std::move(text);
    message_error = error;
    message_until = Clock::now() + kMessageTime;
    dirty = true;
}

void FullScreen::Impl::ctrl_c_on_idle() {
    const auto now = Clock::now();
    if (ctrl_c_at && now - *ctrl_c_at <= kDoubleCtrlC) {
        quit = true;
        return;
    }
    ctrl_c_at = now;
    show_message("Ctrl-C again to leave (or Ctrl-D, /quit)", false);
}

void FullScreen::Impl::scroll_by(int rows) {
    const int max_top = std::max(0, view_total - view_height);
    if (follow) view_top = max_top;
    view_top += rows;
    if (view_top >= max_top) {
        follow = true;
        view_top = max_top;
    } else {
        follow = false;
        view_top = std::max(0, view_top);
    }
}

void FullScreen::Impl::scroll_to_top() {
    follow = view_total <= view_height;
    view_top = 0;
}

void FullScreen::Impl::scroll_to_end() {
    follow = true;
}

bool FullScreen::Impl::handle_picker_key(const tui::KeyEvent& key) {
    const int count = static_cast<int>(sessions.size());
    switch (key.key) {
        case tui::Key::Up:
        case tui::Key::WheelUp:
            picker_index = std::max(0, picker_index - 1);
            break;
        case tui::Key::Down:
        case tui::Key::WheelDown:
            picker_index = std::min(std::max(0, count - 1), picker_index + 1);
            break;
        case tui::Key::PageUp:
            picker_index = std::max(0, picker_index - 10);
            break;
        case tui::Key::PageDown:
            picker_index = std::min(std::max(0, count - 1), picker_index + 10);
            break;
        case tui::Key::Home:
            picker_index = 0;
            break;
        case tui::Key::End:
            picker_index = std::max(0, count - 1);
            break;
        case tui::Key::Enter:
            if (job != JobKind::None) {
                show_message("wait for the reply to finish (Esc stops it)", false);
            } else if (picker_index < count) {
                picker_open = false;
                start_job(JobKind::Command, "/load " + sessions[picker_index].id);
            }
            break;
        case tui::Key::Escape:
        case tui::Key::Function:
            picker_open = false;
            break;
        case tui::Key::Control:
            if (key.letter == 'n') return handle_picker_key({tui::Key::Down});
            if (key.letter == 'p') return handle_picker_key({tui::Key::Up});
            if (key.letter == 'o' || key.letter == 'c') picker_open = false;
            break;
        case tui::Key::Text:
            if (key.text == "q") picker_open = false;
            break;
        default:
            break;
    }
    return true;  // the picker has the keyboard while it is open
}

void FullScreen::Impl::handle_key(const tui::KeyEvent& key) {
    dirty = true;
    if (picker_open && handle_picker_key(key)) return;
    if (ctrl_x_pending) {
        ctrl_x_pending = false;
        if (key.key == tui::Key::Control && key.letter == 'e') {
            compose_in_editor();
            return;
        }
    }
    const bool busy = job != JobKind::None;
    const auto stop_reply = [&] {
        cancel.store(true);
        controller->request_cancel();
        // A command's long work (/model loading a large file) stops the same way.
        show_message(job == JobKind::Command ? "stopping…" : "stopping the reply…", false);
    };
    switch (key.key) {
        case tui::Key::Text:
        case tui::Key::Paste:
            input.insert(key.text);
            break;
        case tui::Key::Enter:
            send_input();
            break;
        case tui::Key::Newline:
            input.insert("\n");
            break;
        case tui::Key::Tab:
            complete_input();
            break;
        case tui::Key::Backspace:
            input.backspace();
            break;
        case tui::Key::AltBackspace:
            input.kill_word_back();
            break;
        case tui::Key::Delete:
            input.delete_forward();
            break;
        case tui::Key::Left:
            key.ctrl ? input.word_left() : input.left();
            break;
        case tui::Key::Right:
            key.ctrl ? input.word_right() : input.right();
            break;
        case tui::Key::Up:
            input.up();
            break;
        case tui::Key::Down:
            input.down();
            break;
        case tui::Key::Home:
            if (key.ctrl || input.empty()) {
                scroll_to_top();
            } else {
                input.line_start();
            }
            break;
        case tui::Key::End:
            if (key.ctrl || input.empty()) {
                scroll_to_end();
            } else {
                input.line_end();
            }
            break;
        case tui::Key::PageUp:
            scroll_by(-std::max(1, view_height - 1));
            break;
        case tui::Key::PageDown:
            scroll_by(std::max(1, view_height - 1));
            break;
        case tui::Key::WheelUp:
            scroll_by(-kWheelRows);
            break;
        case tui::Key::WheelDown:
            scroll_by(kWheelRows);
            break;
        case tui::Key::Escape:
            if (busy) {
                stop_reply();
            } else if (confirming) {
                answer_no();
            } else if (editing_last) {
                editing_last = false;
                input.take();
                show_message("edit cancelled", false);
            }
            break;
        case tui::Key::Function:
            if (key.number == 2) open_picker();
            if (key.number == 1) run_command("/help");
            break;
        case tui::Key::Alt:
            if (key.text == "b") input.word_left();
            if (key.text == "f") input.word_right();
            if (key.text == "d") input.kill_word_forward();
            break;
        case tui::Key::Control:
            switch (key.letter) {
                case 'c':
                    if (busy) {
                        stop_reply();
                    } else if (confirming) {
                        answer_no();
                    } else if (!input.empty() || editing_last) {
                        input.take();
                        editing_last = false;
                    } else {
                        ctrl_c_on_idle();
                    }
                    break;
                case 'd':
                    if (input.empty()) {
                        quit = true;
                    } else {
                        input.delete_forward();
                    }
                    break;
                case 'a':
                    input.line_start();
                    break;
                case 'e':
                    input.line_end();
                    break;
                case 'b':
                    input.left();
                    break;
                case 'f':
                    input.right();
                    break;
                case 'k':
                    input.kill_to_line_end();
                    break;
                case 'u':
                    input.kill_to_line_start();
                    break;
                case 'w':
                    input.kill_word_back();
                    break;
                case 'p':
                    input.up();
                    break;
                case 'n':
                    input.down();
                    break;
                case 't':
                    transcript.set_thinking_expanded(!transcript.thinking_expanded());
                    break;
                case 'o':
                    open_picker();
                    break;
                case 'l':
                    screen->invalidate();
                    break;
                case 'x':
                    ctrl_x_pending = true;
                    break;
                default:
                    break;
            }
            break;
        default:
            break;
    }
}

void FullScreen::Impl::send_input() {
    if (job != JobKind::None) {
        show_message("a reply is being written: Esc or Ctrl-C stops it", false);
        return;
    }
    const std::string text = input.text();
    if (confirming) {
        // The answer to /run's or a tool call's question goes to the controller as it is, not
        // as a prompt (an empty one says no).
        confirming = false;
        input.take();
        start_job(JobKind::Command, text.empty() ? "n" : text);
        return;
    }
    if (text.find_first_not_of(" \n") == std::string::npos) return;
    input.remember(text);
    save_history_entry(text);
    input.take();
    follow = true;
    if (editing_last) {
        editing_last = false;
        start_job(JobKind::Edit, "/edit " + text);
        return;
    }
    if (ChatController::is_command(text)) {
        run_command(text);
        return;
    }
    start_job(JobKind::Reply, text);
}

void FullScreen::Impl::answer_no() {
    confirming = false;
    input.take();
    start_job(JobKind::Command, "n");
}

void FullScreen::Impl::run_command(const std::string& line) {
    const auto [typed, args] = split_command(line);
    // Its other names ("/q", "/?") as the command they stand for.
    const std::string name = ChatController::command_name(typed);
    if (name == "/quit") {
        quit = true;
    } else if (name == "/sessions") {
        open_picker();
    } else if (name == "/copy") {
        copy_reply(args);
    } else if (name == "/help") {
        transcript.add({tui::EntryKind::Notice,
                        ChatController::help_text(/*full_screen=*/true) + "\n" + kKeysHelp});
    } else if (name == "/edit" && args.empty()) {
        const auto& entries = transcript.entries();
        auto last_user = std::find_if(entries.rbegin(), entries.rend(), [](const tui::Entry& e) {
            return e.kind == tui::EntryKind::User;
        });
        if (last_user == entries.rend()) {
            show_message("/edit: there is no prompt to change yet", true);
            return;
        }
        editing_last = true;
        input.set_text(last_user->text);
        show_message("editing your last prompt: Enter answers it on a new branch, Esc cancels",
                     false);
    } else if (name == "/edit") {
        start_job(JobKind::Edit, line);
    } else if (name == "/regen") {
        start_job(JobKind::Regenerate, line);
    } else if (name == "/continue") {
        start_job(JobKind::Continue, line);
    } else {
        start_job(JobKind::Command, line);
    }
}

void FullScreen::Impl::open_picker() {
    picker_open = true;
    picker_index = 0;
    for (size_t i = 0; i < sessions.size(); ++i) {
        if (sessions[i].id == session_id) picker_index = static_cast<int>(i);
    }
    if (job == JobKind::None) start_job(JobKind::Refresh, {});
}

std::string FullScreen::Impl::session_title() const {
    for (const auto& s : sessions) {
        if (s.id == session_id) return s.title;
    }
    return {};
}

void FullScreen::Impl::complete_input() {
    if (input.text().find('\n') != std::string::npos || input.cursor() != input.text().size()) {
        return;
    }
    tui::CompletionSources sources;
    sources.commands = ChatController::command_names(/*full_screen=*/true);
    for (const auto& s : sessions) sources.session_ids.push_back(s.id);
    sources.models = model_names;
    sources.settings = ChatController::setting_names();
    const tui::Completion done = tui::complete_line(input.text(), sources);
    if (done.line != input.text()) input.set_text(done.line);
    if (!done.candidates.empty()) {
        std::string list;
        for (const auto& c : done.candidates) list += (list.empty() ? "" : "  ") + c;
        show_message(list, false);
    }
}

void FullScreen::Impl::load_history() {
    if (options.history_path.empty()) return;
    std::ifstream in(options.history_path);
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        // readline's history files may hold "#<time>" lines between entries.
        if (line.size() > 1 && line[0] == '#' &&
            std::isdigit(static_cast<unsigned char>(line[1]))) {
            continue;
        }
        if (!line.empty()) lines.push_back(line);
    }
    const size_t first = lines.size() > kHistoryLimit ? lines.size() - kHistoryLimit : 0;
    for (size_t i = first; i < lines.size(); ++i) input.remember(lines[i]);
}

void FullScreen::Impl::save_history_entry(const std::string& entry) {
    // The file is line mode's too (one entry a line): multi-line prompts stay in memory.
    if (options.history_path.empty() || entry.find('\n') != std::string::npos) return;
    std::error_code ignored;
    fs::create_directories(fs::path(options.history_path).parent_path(), ignored);
    const int fd =
        ::open(options.history_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const std::string line = entry + "\n";
    [[maybe_unused]] const ssize_t n = write(fd, line.data(), line.size());
    close(fd);
}

}  // namespace ember::ui
