// Switching the model a chat talks to (/model NAME), as an interface: loading a model, wiring
// its state store and recording the switch belong to app/, which ui/ may not see. A chat
// whose model cannot be switched (a remote server's) has no switcher.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ember::ui {

class ModelSwitcher {
public:
    virtual ~ModelSwitcher() = default;

    // The model answering now: its file name (what the status line shows) and its path.
    virtual std::string current_name() const = 0;
    virtual std::string current_path() const = 0;
    // The names /model NAME accepts besides a path (the models Ember finds by itself, as -m
    // takes them), for /model's list and Tab completion.
    virtual std::vector<std::string> candidates() = 0;
    // Makes the model `name` names (a path, or a found model's name as -m resolves it) answer
    // from the next turn on: the messages so far stay and are rendered with its own chat
    // template; no state of the old model is used for it. Returns a line for the user.
    // Throws with a one-line reason when `name` names no model or its file does not load;
    // the old model then goes on as if nothing happened. `stop` (may be empty) is asked while
    // the file loads (Esc, Ctrl-C: a large file takes seconds); true ends the load with an
    // exception, the old model still answering.
    virtual std::string switch_to(const std::string& name,
                                  const std::function<bool()>& stop = {}) = 0;
};

}  // namespace ember::ui
