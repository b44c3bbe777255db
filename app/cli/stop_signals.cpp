#include "app/cli/stop_signals.h"

#include <atomic>

namespace ember::app {

namespace {

constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

// Handlers take no user data: the one signal recorded lives here (a lock-free atomic, which a
// handler may store to). One StopSignals at a time uses it.
std::atomic<int> g_raised{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signal_number) {
    int expected = 0;
    g_raised.compare_exchange_strong(expected, signal_number);
    // The next one takes the default action: a stop that hangs can still be forced.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(signal_number, &fallback, nullptr);
}

}  // namespace

StopSignals::StopSignals() {
    g_raised.store(0);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocking read of stdin returns (EINTR)
    for (int i = 0; i < 3; ++i) {
        struct sigaction current {};
        sigaction(kSignals[i], nullptr, &current);
        // An ignored signal (nohup) stays ignored; someone else's handler stays theirs.
        if (current.sa_handler != SIG_DFL) continue;
        installed_[i] = sigaction(kSignals[i], &action, &previous_[i]) == 0;
    }
}

StopSignals::~StopSignals() {
    for (int i = 0; i < 3; ++i) {
        if (installed_[i]) sigaction(kSignals[i], &previous_[i], nullptr);
    }
}

int StopSignals::raised() const {
    return g_raised.load();
}

}  // namespace ember::app
