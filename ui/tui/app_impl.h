// FullScreen's state and the functions that work on it, shared by app.cpp (the loop, keys,
// jobs) and view.cpp (drawing). Internal to ui/tui.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ui/chat/chat_controller.h"
#include "ui/tui/full_screen.h"
#include "ui/tui/input.h"
#include "ui/tui/keys.h"
#include "ui/tui/screen.h"
#include "ui/tui/transcript.h"
#include "ui/tui/view.h"
#include "ui/tui/worker.h"

namespace ember::ui {

using Clock = std::chrono::steady_clock;

// What the job running on the worker is, for what the UI does when it ends.
// ToolsContinue: the model reads tool results and goes on (ChatController::continue_after_tools).
enum class JobKind { None, Reply, Regenerate, Edit, Continue, Command, Refresh, ToolsContinue };

struct FullScreen::Impl {
    FullScreenOptions options;
    std::unique_ptr<tui::Screen> screen;
    tui::EventQueue events;
    tui::KeyDecoder keys;
    Clock::time_point started = Clock::now();

    // While the model loads: a thread of its own keeps the screen alive.
    std::thread loader;
    std::atomic<bool> loaded{false};
    std::vector<tui::KeyEvent> typed_while_loading;
    std::string loading_note;  // the last line written to stderr during the load

    // The chat.
    ChatController* controller = nullptr;
    std::unique_ptr<tui::Worker> worker;
    std::atomic<bool> cancel{false};
    JobKind job = JobKind::None;
    Clock::time_point job_started;
    std::string job_activity;  // what a job that is no reply does (/model: "loading NAME")
    int64_t streamed = 0;
    bool reply_thinking = false;
    // A long prompt being read, as the worker reports it (ChatController::set_prefill_progress);
    // total 0: none is being read.
    std::atomic<int64_t> prefill_done{0};
    std::atomic<int64_t> prefill_total{0};
    std::atomic<int64_t> prefill_millis{0};

    tui::Transcript transcript;
    tui::InputEditor input;
    bool editing_last = false;      // the input holds the last prompt for /edit
    bool ctrl_x_pending = false;    // Ctrl-X was pressed: Ctrl-E next composes in $EDITOR
    bool confirming = false;        // the next input answers a yes/no question (/run, a tool call)
    bool confirming_tool = false;   // the question is a tool call's (not /run's)
    std::string shown_reply_model;  // the model of the last reply in the transcript
    // When the key decoder began holding a lone ESC (it may start a sequence).
    std::optional<Clock::time_point> escape_since;

    // Scrolling: the view follows the end unless the user scrolled back.
    bool follow = true;
    int view_top = 0;     // first transcript row shown (when not following)
    int view_height = 1;  // transcript rows in the last frame
    int view_width = 0;
    int view_total = 0;

    // The status line.
    std::string model_name;
    int64_t context_used = 0;
    int64_t context_total = 0;
    std::optional<TurnResult> last_turn;
    std::string session_id;
    std::vector<SessionSummary> sessions;
    std::vector<std::string> model_names;  // what /model NAME takes, for Tab

    // A one-line message above the status line, shown for a while.
    std::string message;
    bool message_error = false;
    Clock::time_point message_until;

    bool picker_open = false;
    int picker_index = 0;

    bool quit = false;
    int exit_status = 0;
    // Ctrl-C on an empty input leaves only when pressed again within a second.
    std::optional<Clock::time_point> ctrl_c_at;
    // Notices added to the transcript when the chat starts (FullScreen::add_notice).
    std::vector<std::string> start_notices;
    bool dirty = true;
    bool key_pressed = false;  // draw without waiting for the frame interval
    Clock::time_point last_frame;

    // app.cpp
    void loading_loop();
    void abort_loading(int signal_number);
    int run(ChatController& c);
    void loop();
    void poll_once();
    void handle_key(const tui::KeyEvent& key);
    bool handle_picker_key(const tui::KeyEvent& key);
    void scroll_by(int rows);
    void scroll_to_top();
    void scroll_to_end();
    void send_input();
    // Esc or Ctrl-C on a [y/N] question (/run's, a tool call's): answered no at once, so a
    // "y" typed later is a prompt, never a yes.
    void answer_no();
    void run_command(const std::string& line);
    void start_job(JobKind kind, const std::string& line);
    void apply(tui::StreamEvent& event);
    void apply(tui::DoneEvent& event);
    // `notes`: what went with each non-system message (attachments, a reply's model).
    void rebuild_transcript(const std::vector<ChatMessage>& messages,
                            const std::vector<MessageNotes>& notes);
    // Before a reply from `model` (empty: unknown): a line naming it where it changes.
    void mark_reply_model(const std::string& model);
    // A done job's tool calls and results in the transcript; the model's next step if due.
    void show_tool_activity(const ChatOutcome& outcome);
    void complete_input();
    void show_message(std::string text, bool error);
    void ctrl_c_on_idle();
    void open_picker();
    void load_history();
    void save_history_entry(const std::string& entry);
    std::string session_title() const;

    // compose.cpp
    void compose_in_editor();
    void copy_reply(const std::string& args);

    // view.cpp
    void draw();
    void draw_loading();
    void draw_transcript(int top_row, int height);
    void draw_status(int row);
    void draw_input(int first_row, int height, const tui::InputEditor::Layout& layout);
    void draw_picker(int top_row, int height);
};

}  // namespace ember::ui
