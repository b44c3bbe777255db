// /file and /run: text brought into the next message (ui/io/attachments.h).
#include <algorithm>
#include <cctype>
#include <functional>
#include <stdexcept>
#include <string>

#include "ui/chat/chat_controller.h"
#include "ui/io/attachments.h"
#include "ui/io/progress.h"

namespace ember::ui {

namespace {

// A command's output attached at most (more is refused, never cut), and its time limit.
constexpr size_t kMaxRunOutputBytes = size_t{1} << 20;
constexpr int kRunTimeoutMs = 60'000;

ChatOutcome said(std::string message, bool error = false) {
    ChatOutcome outcome;
    outcome.message = std::move(message);
    outcome.error = error;
    return outcome;
}

std::string trimmed(const std::string& s) {
    const size_t begin = s.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return {};
    return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::string base_name(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

ChatOutcome ChatController::attach(Attachment attachment, const std::string& what) {
    // The tokens the next prompt takes with and without it, counted as the turn will count
    // them: the conversation rendered with a user message holding the attachments.
    // A large file takes seconds to count: Esc / Ctrl-C stop the count (and the attaching).
    const std::function<bool()> stop = [this] { return stop_requested(); };
    const auto needed_with = [&](const std::vector<Attachment>& list) {
        engine_.add_message({"user", join_attachments(list, "?"), {}, {}});
        int64_t tokens = 0;
        try {
            tokens = engine_.context_needed(&stop);
        } catch (...) {
            engine_.pop_message();
            throw;
        }
        engine_.pop_message();
        return tokens;
    };
    auto with = attachments_;
    with.push_back(std::move(attachment));
    const int64_t context = engine_.context_size();
    const int64_t before = needed_with(attachments_);
    const size_t bytes = with.back().content.size();
    // Room the turn keeps for the reply (as Conversation::respond: what n-predict asks, at
    // most half the context).
    const int64_t asked = generation_.max_tokens < 0 ? context / 2 : generation_.max_tokens;
    const int64_t reserve = std::min<int64_t>(asked, context / 2);
    const auto too_large = [&](const std::string& tokens) {
        return said(what + " is " + tokens + " tokens and " +
                        grouped(std::max<int64_t>(0, context - reserve - before)) +
                        " of the context's " + grouped(context) + " are free (" + grouped(reserve) +
                        " kept for the reply; /set ctx N makes it larger); " + "nothing attached",
                    true);
    };
    // Counting a file's tokens takes seconds for the largest ones: one that cannot fit even
    // at the vocabulary's longest token per token is refused before it is counted.
    const int64_t fewest = engine_.fewest_tokens(bytes);
    if (context > 0 && before + fewest + reserve > context) {
        return too_large("at least " + grouped(fewest));
    }
    const int64_t after = needed_with(with);
    const int64_t tokens = after - before;
    if (context > 0 && after + reserve > context) return too_large(grouped(tokens));
    attachments_ = std::move(with);
    std::string message = "attached " + what + ": ";
    message += context > 0 ? grouped(tokens) + " tokens (the next prompt takes " + grouped(after) +
                                 " of " + grouped(context) + ")"
                           : grouped(static_cast<int64_t>(bytes)) + " bytes";
    if (attachments_.size() > 1) {
        message += "; " + std::to_string(attachments_.size()) + " attachments wait";
    }
    return said(message + "; it goes before your next message");
}

ChatOutcome ChatController::command_file(const std::string& path) {
    if (path.empty())
        return said("usage: /file PATH (attaches a text file to your next message)", true);
    ChatOutcome outcome;
    cancel_requested_.store(false, std::memory_order_relaxed);  // Esc from here on stops it
    try {
        outcome = attach(read_text_file(path), base_name(path));
    } catch (const std::runtime_error& e) {
        if (stop_requested()) return said("/file: stopped; nothing attached");
        return said(std::string("/file: ") + e.what() + "; nothing attached", true);
    }
    if (outcome.error) outcome.message = "/file: " + outcome.message;
    return outcome;
}

ChatOutcome ChatController::command_run(const std::string& command) {
    if (command.empty())
        return said("usage: /run CMD (attaches its output to your next message)", true);
    run_asked_ = command;
    ChatOutcome outcome = said("run this command? " + command +
                               "\n[y/N] y runs it (sh -c) and attaches its output to your next "
                               "message; anything else cancels");
    outcome.confirm = true;
    return outcome;
}

ChatOutcome ChatController::answer_run(const std::string& answer) {
    const std::string command = *run_asked_;
    run_asked_.reset();
    std::string yes = trimmed(answer);
    std::transform(yes.begin(), yes.end(), yes.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (yes != "y" && yes != "yes") return said("/run: cancelled; nothing ran");
    const CommandOutput out = run_shell_command(command, kMaxRunOutputBytes, kRunTimeoutMs);
    const std::string status = " (exit " + std::to_string(out.exit_status) + ")";
    if (out.timed_out) {
        return said("/run: " + command + " ran past " + std::to_string(kRunTimeoutMs / 1000) +
                        " s and was stopped; nothing attached",
                    true);
    }
    if (out.too_large) {
        return said("/run: " + command + " wrote more than " +
                        std::to_string(kMaxRunOutputBytes >> 20) +
                        " MiB and was stopped; nothing attached",
                    true);
    }
    if (const std::string problem = text_problem(out.output); !problem.empty()) {
        return said(
            "/run: the output of " + command + " is not text: " + problem + "; nothing attached",
            true);
    }
    if (out.output.empty())
        return said("/run: " + command + " printed nothing" + status + "; nothing attached");
    ChatOutcome outcome =
        attach({"Output of: " + command, out.output}, "the output of " + command + status);
    if (outcome.error) outcome.message = "/run: " + outcome.message;
    return outcome;
}

}  // namespace ember::ui
