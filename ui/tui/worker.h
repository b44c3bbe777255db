// The generation side of the full-screen UI: one thread that runs the controller's work
// (a reply, a command) while the UI thread keeps drawing and reading keys. Results travel
// back as events through a mutex-protected queue; pushing one wakes the UI's poll() through a
// pipe. The controller is touched only from the worker thread while a job runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "ui/chat/chat_controller.h"

namespace ember::ui::tui {

// Reply text as it is generated (consecutive pieces of one kind are merged).
struct StreamEvent {
    TextKind kind = TextKind::Answer;
    std::string text;
    int64_t pieces = 0;  // callbacks merged into this event: about one per token
};

// A job finished; what the UI needs to show the conversation as it now stands.
struct DoneEvent {
    ChatOutcome outcome;
    std::vector<ChatMessage> messages;  // the conversation after the job (system included)
    // What went with each non-system message (ChatController::message_notes), in order.
    std::vector<MessageNotes> notes;
    std::vector<SessionSummary> sessions;
    std::string session_id;
    int64_t context_used = 0;   // tokens the inference state holds
    int64_t context_total = 0;  // the context size
    bool show_stats = false;    // a line of numbers under each reply (/set stats)
    std::string model_name;     // the model answering (empty: as it was; a remote model)
    // After /model: the names it takes now (Tab completion); empty after other jobs.
    std::vector<std::string> model_names;
};

using Event = std::variant<StreamEvent, DoneEvent>;

class EventQueue {
public:
    EventQueue();
    ~EventQueue();
    EventQueue(const EventQueue&) = delete;
    EventQueue& operator=(const EventQueue&) = delete;

    void push(Event event);
    std::vector<Event> take_all();
    // Readable when events are waiting (and after wake()); drain() empties it.
    int wake_fd() const { return read_fd_; }
    int wake_write_fd() const { return write_fd_; }
    void wake();
    void drain();

private:
    std::mutex mutex_;
    std::vector<Event> events_;
    int read_fd_ = -1;
    int write_fd_ = -1;
};

class Worker {
public:
    Worker();
    ~Worker();  // finishes the job in progress, then stops
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    void post(std::function<void()> job);
    // Waits for the queued jobs to finish.
    void finish();

private:
    void loop();

    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::function<void()>> jobs_;
    bool running_job_ = false;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace ember::ui::tui
