#include "ui/line/line_mode.h"

#include <fcntl.h>
#include <poll.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "ui/io/progress.h"
#include "ui/io/terminal_text.h"

namespace ember::ui {

namespace {

// Entries kept in memory and in the history file.
constexpr int kHistoryEntries = 1000;
// Saved conversations offered when Tab completes /load's id.
constexpr int64_t kCompletedSessions = 50;

// readline gets this key when SIGINT arrives at the prompt. With the terminal's ISIG on (which
// readline keeps), pressing Ctrl-C sends the signal rather than the byte, so the byte itself
// is free to carry the interrupt into readline's key dispatch.
constexpr int kInterruptKey = 3;  // Ctrl-C

const char* const kDim = "\033[2m";
const char* const kReset = "\033[0m";

// Shared by the SIGINT handler, readline's key reader and the prompt loop. Signal handlers
// and readline's hooks are plain C function pointers with no user-data argument, so this has
// to be static; it and the completion choices below are the only global mutable state in ui/.
// Setting a lock-free atomic and write() on a pipe are async-signal-safe. The self-pipe wakes the
// key reader's poll() whichever thread the kernel delivers SIGINT to (the engine's worker threads
// do not block it, so the main thread's read() is not reliably interrupted).
struct InterruptSignal {
    std::atomic<bool> raised{false};
    // SIGTERM or SIGHUP (the terminal closed): the reply stops, is saved, and line mode ends.
    std::atomic<int> terminate{0};
    std::atomic<int> wake_read_fd{-1};
    std::atomic<int> wake_write_fd{-1};
};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
InterruptSignal g_interrupt;

extern "C" void on_sigint(int) {
    const int saved_errno = errno;
    g_interrupt.raised.store(true);
    const int fd = g_interrupt.wake_write_fd.load();
    if (fd >= 0) {
        const char byte = 1;
        // A full pipe already holds a wake-up; nothing else can be done in a handler.
        [[maybe_unused]] const ssize_t written = write(fd, &byte, 1);
    }
    errno = saved_errno;
}

extern "C" void on_terminate(int signal_number) {
    g_interrupt.terminate.store(signal_number);
    on_sigint(signal_number);  // stops the reply and wakes the key reader
}

void drain_wake_pipe() {
    const int fd = g_interrupt.wake_read_fd.load();
    char buffer[64];
    while (fd >= 0 && read(fd, buffer, sizeof buffer) > 0) {
    }
}

// readline's key reader: one byte from the terminal, or kInterruptKey once SIGINT has been
// raised. Reads the descriptor directly (no stdio buffer) so that readline's own check for
// pending input (select on the same descriptor) stays truthful.
int read_key(FILE* stream) {
    const int fd = fileno(stream);
    for (;;) {
        if (g_interrupt.terminate.load() != 0) return EOF;
        if (g_interrupt.raised.load()) return kInterruptKey;
        pollfd fds[2] = {{fd, POLLIN, 0}, {g_interrupt.wake_read_fd.load(), POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno != EINTR) return EOF;
            // A signal readline caught for itself (SIGWINCH: redraw at the new width).
            rl_check_signals();
            continue;
        }
        if (fds[1].revents & POLLIN) {
            drain_wake_pipe();
            continue;
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            unsigned char key = 0;
            const ssize_t n = read(fd, &key, 1);
            if (n == 1) return key;
            if (n == 0) return EOF;
            if (errno == EINTR || errno == EAGAIN) continue;
            return EOF;
        }
    }
}

// Tab at the prompt. readline's completion hooks have no user-data argument either, so the
// controller and the matches for the word being completed wait here while readline asks for
// them one by one; set only while run_line_mode runs.
struct CompletionChoices {
    ChatController* controller = nullptr;
    std::vector<std::string> matches;
    size_t next = 0;
};
CompletionChoices g_completion;

char* next_completion(const char* /*text*/, int state) {
    if (state == 0) g_completion.next = 0;
    if (g_completion.next >= g_completion.matches.size()) return nullptr;
    // readline frees what it is given.
    return strdup(g_completion.matches[g_completion.next++].c_str());
}

// What the word before the cursor may become: a command at the start of the line, a model
// after "/model ", a saved conversation after "/load ", a setting after "/set "; nullopt
// elsewhere (a prompt, /file PATH), where readline completes file names as it always did.
std::optional<std::vector<std::string>> completion_choices(ChatController& controller,
                                                           const std::string& before,
                                                           const char* word) {
    if (before.empty() && word[0] == '/') return ChatController::command_names();
    if (before == "/model ") return controller.model_names();
    if (before == "/set ") return ChatController::setting_names();
    if (before == "/load ") {
        std::vector<std::string> ids;
        try {
            for (const auto& s : controller.list_sessions(kCompletedSessions)) ids.push_back(s.id);
        } catch (const std::exception&) {
            // A store that cannot be read completes nothing; /load says why.
        }
        return ids;
    }
    return std::nullopt;
}

char** complete_chat_input(const char* word, int start, int /*end*/) {
    if (g_completion.controller == nullptr) return nullptr;
    const std::string before(rl_line_buffer, static_cast<size_t>(start));
    const auto choices = completion_choices(*g_completion.controller, before, word);
    if (!choices) return nullptr;
    rl_attempted_completion_over = 1;  // no file names where the choices are known
    g_completion.matches.clear();
    for (const auto& choice : *choices) {
        if (choice.starts_with(word)) g_completion.matches.push_back(choice);
    }
    return rl_completion_matches(word, next_completion);
}

// Tab completion for one run of the prompt loop.
class CompletionScope {
public:
    explicit CompletionScope(ChatController& controller) {
        g_completion.controller = &controller;
        previous_ = rl_attempted_completion_function;
        rl_attempted_completion_function = complete_chat_input;
    }
    ~CompletionScope() {
        rl_attempted_completion_function = previous_;
        g_completion = {};
    }
    CompletionScope(const CompletionScope&) = delete;
    CompletionScope& operator=(const CompletionScope&) = delete;

private:
    rl_completion_func_t* previous_ = nullptr;
};

// Bound to kInterruptKey: shows ^C after the line and accepts it; the prompt loop sees the
// raised flag and throws the input away, so the user gets a fresh, empty prompt.
int on_interrupt_key(int /*count*/, int key) {
    rl_point = rl_end;
    rl_redisplay();
    std::fputs("^C", rl_outstream);
    return rl_newline(1, key);
}

bool env_set(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0';
}

// Owns readline's set-up, the SIGINT handler and the history file for one run of line mode.
class LineEditor {
public:
    enum class Status { Line, Interrupted, EndOfInput };
    struct Read {
        Status status = Status::EndOfInput;
        std::string line;
    };

    explicit LineEditor(std::string history_path);
    ~LineEditor();
    LineEditor(const LineEditor&) = delete;
    LineEditor& operator=(const LineEditor&) = delete;

    Read read_line(const char* prompt);
    void remember(const std::string& line);
    bool interrupted() const { return g_interrupt.raised.load(); }
    // The terminating signal that arrived (SIGTERM, SIGHUP), 0: none.
    int terminating() const { return g_interrupt.terminate.load(); }
    void clear_interrupt() {
        g_interrupt.raised.store(false);
        drain_wake_pipe();
    }

private:
    void open_history();

    std::string history_path_;
    struct sigaction previous_sigint_ {};
    struct sigaction previous_sigterm_ {};
    struct sigaction previous_sighup_ {};
    rl_getc_func_t* previous_getc_ = nullptr;
};

LineEditor::LineEditor(std::string history_path) : history_path_(std::move(history_path)) {
    if (g_interrupt.wake_write_fd.load() >= 0) {
        throw std::logic_error("line mode is already running");
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "line mode: pipe");
    }
    g_interrupt.wake_read_fd.store(fds[0]);
    g_interrupt.wake_write_fd.store(fds[1]);
    g_interrupt.raised.store(false);

    rl_readline_name = "ember";
    // readline's own handlers would re-raise SIGINT into ours and then carry on reading the
    // same line; the key reader above turns the signal into a key instead.
    rl_catch_signals = 0;
    previous_getc_ = rl_getc_function;
    rl_getc_function = read_key;
    rl_instream = stdin;
    rl_outstream = stdout;
    rl_initialize();
    for (const char* keymap : {"emacs", "vi-insert", "vi-command"}) {
        if (Keymap map = rl_get_keymap_by_name(keymap)) {
            rl_bind_key_in_map(kInterruptKey, on_interrupt_key, map);
        }
    }
    // Esc is Emacs mode's Meta prefix and readline waits for the key after it however long
    // that takes: Esc, then Enter a second later, read as the unbound Meta-Enter, lost the
    // Enter (and the line was not sent). Meta-Enter sends the line like Enter.
    if (Keymap emacs = rl_get_keymap_by_name("emacs")) {
        rl_bind_keyseq_in_map("\\e\\r", rl_newline, emacs);
        rl_bind_keyseq_in_map("\\e\\n", rl_newline, emacs);
    }
    using_history();
    stifle_history(kHistoryEntries);
    open_history();

    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocking poll() returns EINTR
    sigaction(SIGINT, &action, &previous_sigint_);
    g_interrupt.terminate.store(0);
    action.sa_handler = on_terminate;
    sigaction(SIGTERM, &action, &previous_sigterm_);
    sigaction(SIGHUP, &action, &previous_sighup_);
}

LineEditor::~LineEditor() {
    sigaction(SIGINT, &previous_sigint_, nullptr);
    sigaction(SIGTERM, &previous_sigterm_, nullptr);
    sigaction(SIGHUP, &previous_sighup_, nullptr);
    if (!history_path_.empty()) history_truncate_file(history_path_.c_str(), kHistoryEntries);
    clear_history();
    rl_getc_function = previous_getc_;
    close(g_interrupt.wake_read_fd.exchange(-1));
    close(g_interrupt.wake_write_fd.exchange(-1));
    g_interrupt.raised.store(false);
}

void LineEditor::open_history() {
    if (history_path_.empty()) return;
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(history_path_).parent_path(), error);
    // append_history() needs the file to exist already.
    const int fd = open(history_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        std::fprintf(stderr, "ember: history is not saved: cannot open %s\n",
                     history_path_.c_str());
        history_path_.clear();
        return;
    }
    close(fd);
    read_history(history_path_.c_str());
}

LineEditor::Read LineEditor::read_line(const char* prompt) {
    std::fflush(stdout);
    clear_interrupt();
    char* raw = readline(prompt);
    Read result;
    if (terminating()) {
        result.status = Status::EndOfInput;
    } else if (interrupted()) {
        result.status = Status::Interrupted;
        clear_interrupt();
    } else if (raw != nullptr) {
        result.status = Status::Line;
        result.line = raw;
    }
    std::free(raw);
    return result;
}

void LineEditor::remember(const std::string& line) {
    if (line.empty()) return;
    const HIST_ENTRY* previous = history_get(history_base + history_length - 1);
    if (previous != nullptr && line == previous->line) return;
    add_history(line.c_str());
    // Appended at once, so a crash keeps what was typed; trimmed to size at exit.
    if (!history_path_.empty() && append_history(1, history_path_.c_str()) != 0) {
        std::fprintf(stderr, "ember: history is not saved: cannot write %s\n",
                     history_path_.c_str());
        history_path_.clear();
    }
}

// Streams reply text to stdout, thinking dimmed, and keeps track of the line ending so the
// stats line always starts on a line of its own. On a terminal the text goes through a
// TerminalTextStream: a model can emit ESC and C1 bytes, which must show, not act.
class ReplyPrinter {
public:
    ReplyPrinter(bool color, LineEditor& editor, ChatController& controller)
        : color_(color), terminal_(is_terminal(stdout)), editor_(editor), controller_(controller) {}

    bool operator()(const std::string& text, TextKind kind) {
        if (kind != kind_) {
            put(safe_.finish());
            if (kind_ == TextKind::Thinking && color_) std::fputs(kReset, stdout);
            // The answer starts on its own line after the reasoning.
            if (kind == TextKind::Answer && !at_line_start_) std::fputc('\n', stdout);
            if (kind == TextKind::Thinking && color_) std::fputs(kDim, stdout);
            kind_ = kind;
        }
        put(terminal_ ? safe_.feed(text) : text);
        std::fflush(stdout);
        if (editor_.interrupted()) {
            controller_.request_cancel();
            return false;
        }
        return true;
    }

    void finish() {
        put(safe_.finish());
        if (kind_ == TextKind::Thinking && color_) std::fputs(kReset, stdout);
        if (!at_line_start_) std::fputc('\n', stdout);
        std::fflush(stdout);
        kind_ = TextKind::Answer;
        at_line_start_ = true;
    }

private:
    void put(std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        if (!text.empty()) at_line_start_ = text.back() == '\n';
    }

    bool color_;
    bool terminal_;
    TerminalTextStream safe_;
    LineEditor& editor_;
    ChatController& controller_;
    TextKind kind_ = TextKind::Answer;
    bool at_line_start_ = true;
};

// Notes and errors quote what the user typed (an unknown command, a title); stored and typed
// text below goes through TextWriter like the reply does.
void print_note(const std::string& text, bool dim) {
    if (text.empty()) return;
    TextWriter err(stderr);
    if (dim) err.raw(kDim);
    err.text(text);
    if (dim) err.raw(kReset);
    err.raw("\n");
    std::fflush(stderr);
}

// After /load: the conversation so far, so the user sees where it stands: attachments
// collapsed, and each reply's model where it changes (from the first reply on when another
// model than the one answering now wrote it).
void print_transcript(const ChatController& controller) {
    TextWriter out(stdout);
    const std::vector<MessageNotes> notes = controller.message_notes();
    std::string previous_model = controller.model_name();
    size_t index = 0;
    for (const auto& m : controller.engine().messages()) {
        const MessageNotes note =
            m.role != "system" && index < notes.size() ? notes[index] : MessageNotes{};
        if (m.role != "system") ++index;
        if (m.role == "user") {
            out.raw("> ").text(ChatController::shown_message(m.content, note)).raw("\n");
        } else if (m.role == "assistant") {
            if (!note.model.empty() && note.model != previous_model) {
                out.raw("[model: ").text(note.model).raw("]\n");
            }
            if (!note.model.empty()) previous_model = note.model;
            if (!m.content.empty() || m.tool_calls.empty()) out.text(m.content).raw("\n");
            for (const ToolCall& call : m.tool_calls) {
                out.raw("[tool call] ").text(describe_call(call)).raw("\n");
            }
        } else if (m.role == "tool") {
            out.raw("[tool] ").text(shown_result(m)).raw("\n");
        } else {
            out.raw("[system] ").text(m.content).raw("\n");
        }
    }
    std::fflush(stdout);
}

void show_outcome(const ChatOutcome& outcome, const std::string& input, bool color,
                  ChatController& controller) {
    const bool dim_stderr = color && isatty(STDERR_FILENO);
    if (outcome.turn) {
        const std::string note = controller.show_stats()
                                     ? ChatController::turn_summary(*outcome.turn)
                                     : ChatController::turn_notes(*outcome.turn);
        if (!note.empty()) print_note(note, dim_stderr);
    }
    TextWriter out(stdout);
    for (const std::string& result : outcome.tool_results) {
        out.raw(color ? kDim : "").raw("[tool] ").text(result).raw(color ? kReset : "").raw("\n");
    }
    if (!outcome.tool_proposal.empty())
        out.raw("[tool call] ").text(outcome.tool_proposal).raw("\n");
    std::fflush(stdout);
    if (outcome.error) {
        print_note(outcome.message, false);
        return;
    }
    if (!outcome.message.empty()) {
        TextWriter(stdout).text(outcome.message).raw("\n");
        std::fflush(stdout);
    }
    if (input.starts_with("/load")) print_transcript(controller);
}

// One step of the chat: a prompt, a command, an answer to a question, the model going on
// after tool results; its reply streams to the terminal, then what it left is shown.
ChatOutcome run_step(const std::function<ChatOutcome(const TextCallback&)>& run,
                     const std::string& typed, ChatController& controller, LineEditor& editor,
                     const LineModeOptions& options) {
    ReplyPrinter printer(options.color, editor, controller);
    const TextCallback on_text = [&](const std::string& text, TextKind kind) {
        return printer(text, kind);
    };
    // A long prompt's progress, redrawn in place on the terminal until the reply starts.
    std::optional<TerminalProgress> progress;
    if (is_terminal(stdout)) progress.emplace(stdout);
    controller.set_prefill_progress([&progress](const PrefillProgress& p) {
        if (progress) progress->prefill(p);
    });
    editor.clear_interrupt();
    ChatOutcome outcome = run(on_text);
    controller.set_prefill_progress({});
    if (progress) progress->clear();
    printer.finish();
    // A Ctrl-C that stopped the reply is spent; it must not also clear the next prompt.
    editor.clear_interrupt();
    show_outcome(outcome, typed, options.color, controller);
    return outcome;
}

// After a step: its questions (/run's, each tool call's) and the model reading tool results,
// until the turn is over. False: the user asked to leave.
bool follow_up(ChatOutcome outcome, ChatController& controller, LineEditor& editor,
               const LineModeOptions& options) {
    while (outcome.confirm || outcome.tools_continue) {
        if (editor.terminating() != 0) return false;
        if (outcome.confirm) {
            // This line answers it (Enter alone, Ctrl-C or Ctrl-D: no). Typed or pasted
            // before the question was asked, a line is not an answer to it: the terminal's
            // pending input is discarded first, so a 'y' in a paste cannot approve a call
            // whose arguments were never shown.
            if (isatty(STDIN_FILENO)) tcflush(STDIN_FILENO, TCIFLUSH);
            const LineEditor::Read answer = editor.read_line("run it? [y/N] ");
            const std::string given =
                answer.status == LineEditor::Status::Line ? answer.line : std::string("n");
            outcome = run_step(
                [&](const TextCallback& on_text) {
                    return controller.handle_command(given, on_text);
                },
                std::string(), controller, editor, options);
        } else {
            outcome = run_step(
                [&](const TextCallback& on_text) {
                    return controller.continue_after_tools(on_text);
                },
                std::string(), controller, editor, options);
        }
    }
    return !outcome.quit;
}

}  // namespace

std::string default_history_path() {
    // The XDG base directory spec ignores relative paths.
    const char* data_home = std::getenv("XDG_DATA_HOME");
    if (data_home != nullptr && data_home[0] == '/') {
        return std::string(data_home) + "/ember/history";
    }
    const char* home = std::getenv("HOME");
    if (home != nullptr && home[0] == '/') return std::string(home) + "/.local/share/ember/history";
    return {};
}

bool stdout_wants_color() {
    const char* term = std::getenv("TERM");
    return isatty(STDOUT_FILENO) && !env_set("NO_COLOR") &&
           !(term != nullptr && std::string(term) == "dumb");
}

std::optional<MultilineInput::Complete> MultilineInput::feed(const std::string& line) {
    const auto append = [&](std::string_view part) {
        if (has_text_) text_ += '\n';
        text_ += part;
        has_text_ = true;
    };
    const auto take = [&](bool from_block) {
        Complete complete{std::move(text_), from_block};
        reset();
        return complete;
    };
    if (in_block_) {
        if (line == "\"\"\"") return take(true);
        append(line);
        return std::nullopt;
    }
    if (!continuing_ && line == "\"\"\"") {
        in_block_ = true;
        return std::nullopt;
    }
    if (!line.empty() && line.back() == '\\') {
        append(std::string_view(line).substr(0, line.size() - 1));
        continuing_ = true;
        return std::nullopt;
    }
    append(line);
    return take(false);
}

void MultilineInput::reset() {
    text_.clear();
    has_text_ = false;
    continuing_ = false;
    in_block_ = false;
}

int run_line_mode(ChatController& controller, const LineModeOptions& options) {
    LineEditor editor(options.history_path);
    const CompletionScope completion(controller);
    MultilineInput input;
    std::printf("ember line mode: /help for commands, Ctrl-D to leave\n");
    // Ctrl-C stops a reply also before its first text (a remote server still thinking, a
    // long prompt being read); SIGTERM and SIGHUP stop it and end line mode.
    controller.stop_also_on(&g_interrupt.raised);
    controller.leave_also_on(&g_interrupt.terminate);
    // A resumed conversation's tool call that waited for the user's yes asks again.
    ChatOutcome waiting = controller.waiting_call_question();
    for (;;) {
        if (waiting.confirm) {
            show_outcome(waiting, std::string(), options.color, controller);
            const ChatOutcome asked = std::exchange(waiting, ChatOutcome{});
            if (!follow_up(asked, controller, editor, options)) break;
            continue;
        }
        const LineEditor::Read read = editor.read_line(input.pending() ? "... " : "> ");
        if (read.status == LineEditor::Status::EndOfInput) {
            // readline leaves the cursor after the prompt; the shell's prompt wants a new line.
            std::fputc('\n', stdout);
            break;
        }
        if (read.status == LineEditor::Status::Interrupted) {
            input.reset();
            continue;
        }
        editor.remember(read.line);
        const auto complete = input.feed(read.line);
        if (!complete || complete->text.find_first_not_of(" \t") == std::string::npos) continue;

        const bool command = !complete->from_block && ChatController::is_command(complete->text);
        const ChatOutcome outcome = run_step(
            [&](const TextCallback& on_text) {
                return command ? controller.handle_command(complete->text, on_text)
                               : controller.submit(complete->text, on_text);
            },
            command ? complete->text : std::string(), controller, editor, options);
        if (editor.terminating() != 0) break;
        if (!follow_up(outcome, controller, editor, options)) break;
    }
    std::fflush(stdout);
    const int signal_number = editor.terminating();
    controller.leave_also_on(nullptr);  // the flag goes with the editor
    return signal_number != 0 ? 128 + signal_number : 0;
}

}  // namespace ember::ui
