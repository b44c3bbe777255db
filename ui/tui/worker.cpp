#include "ui/tui/worker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ember::ui::tui {

EventQueue::EventQueue() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "full-screen UI: pipe");
    }
    read_fd_ = fds[0];
    write_fd_ = fds[1];
}

EventQueue::~EventQueue() {
    close(read_fd_);
    close(write_fd_);
}

void EventQueue::push(Event event) {
    bool was_empty = false;
    {
        std::lock_guard lock(mutex_);
        was_empty = events_.empty();
        auto* text = std::get_if<StreamEvent>(&event);
        auto* last = events_.empty() ? nullptr : std::get_if<StreamEvent>(&events_.back());
        if (text != nullptr && last != nullptr && last->kind == text->kind) {
            last->text += text->text;
            last->pieces += text->pieces;
        } else {
            events_.push_back(std::move(event));
        }
    }
    // One wake-up per batch: the UI takes everything queued when it wakes.
    if (was_empty) wake();
}

std::vector<Event> EventQueue::take_all() {
    std::lock_guard lock(mutex_);
    std::vector<Event> out;
    out.swap(events_);
    return out;
}

void EventQueue::wake() {
    const char byte = 1;
    // A full pipe already holds a wake-up.
    [[maybe_unused]] const ssize_t n = write(write_fd_, &byte, 1);
}

void EventQueue::drain() {
    char buffer[256];
    while (read(read_fd_, buffer, sizeof buffer) > 0) {
    }
}

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void Worker::post(std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    changed_.notify_all();
}

void Worker::finish() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return jobs_.empty() && !running_job_; });
}

void Worker::loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
        changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, nothing left
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        running_job_ = true;
        lock.unlock();
        job();  // jobs catch their own exceptions (the controller does not throw)
        lock.lock();
        running_job_ = false;
        changed_.notify_all();
    }
}

}  // namespace ember::ui::tui
