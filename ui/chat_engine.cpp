#include "ui/chat_engine.h"

namespace ember::ui {

ChatReply LocalChatEngine::respond(Sampler& sampler, const GenerateOptions& options,
                                   const TextCallback& on_text,
                                   const StopRequested& stop_requested) {
    // In process, every generated piece of text passes through here, so the stop request is
    // checked with it; the engine has no waiting that text would not interrupt.
    const TextCallback checked = [&](const std::string& text, TextKind kind) {
        const bool keep_going = !on_text || on_text(text, kind);
        return keep_going && !(stop_requested && stop_requested());
    };
    ChatReply reply;
    reply.turn = conversation_.respond(sampler, options, checked);
    return reply;
}

std::optional<bool> LocalChatEngine::thinking() const {
    const auto& vars = conversation_.options().template_vars;
    if (vars.contains("enable_thinking") && vars["enable_thinking"].is_boolean()) {
        return vars["enable_thinking"].get<bool>();
    }
    return std::nullopt;
}

std::string LocalChatEngine::reasoning_effort() const {
    const auto& vars = conversation_.options().template_vars;
    if (vars.contains("reasoning_effort") && vars["reasoning_effort"].is_string()) {
        return vars["reasoning_effort"].get<std::string>();
    }
    return {};
}

}  // namespace ember::ui
