// SIGINT, SIGTERM and SIGHUP asking long work to stop rather than killing it: a scripted chat
// (the reply in progress stops, is saved and reported), `sessions prune`, `bench-resume`.
// While a StopSignals lives, the first of these signals is only recorded; the work polls
// raised() where it can stop cleanly, and ends with 128 + the signal. A second one (the user
// pressing Ctrl-C again, a supervisor insisting) ends the process at once, the usual way.
#pragma once

#include <csignal>

namespace ember::app {

class StopSignals {
public:
    StopSignals();   // installs the handlers (where the default action is in place)
    ~StopSignals();  // puts the previous ones back
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    // The signal that asked to stop, 0: none. Async-signal-safe, any thread.
    int raised() const;

private:
    struct sigaction previous_[3]{};
    bool installed_[3] = {false, false, false};
};

}  // namespace ember::app
