// libFuzzer target for what `ember serve` makes of a request body (app/serve/api.cpp): the
// input is the body of POST /v1/chat/completions (or, first byte 'P', of /v1/completions).
// Parsing must end in a request or an ApiError naming the field; a parsed request's sampling
// fields applied to the defaults, its tools checked and its response_format and tools
// compiled (under a small budget), must end the same way or in a ToolError naming the field
// (which the server answers as a 400).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "app/serve/api.h"
#include "engine/generate/tool_calls.h"
#include "engine/grammar/grammar.h"

namespace {

ember::grammar::CompileLimits small_limits() {
    ember::grammar::CompileLimits limits;
    limits.max_elements = 1 << 16;
    limits.max_rules = 1 << 14;
    limits.max_time = std::chrono::seconds(2);
    return limits;
}

void use(const ember::serve::SamplingRequest& sampling) {
    (void)ember::serve::sampling_for(sampling, ember::SamplingParams{});
    ember::grammar::CompileBudget budget(small_limits());
    (void)ember::serve::compile_response_format(sampling.response_format, &budget);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ember::serve;
    const std::string body(reinterpret_cast<const char*>(data), size);
    const RequestLimits limits;  // the server's own
    try {
        if (!body.empty() && body[0] == 'P') {
            const CompletionRequest request = parse_completion_request(body.substr(1), limits);
            use(request.sampling);
        } else {
            const ChatRequest request = parse_chat_request(body, limits);
            use(request.sampling);
            // As the server does: the tools checked, then the grammar of their calls compiled
            // (held from the reply's start when a call is forced, else from its marker on).
            if (request.tools.active()) {
                ember::validate_tool_options(request.tools);
                ember::grammar::CompileBudget budget(small_limits());
                const auto format = ember::ToolCallFormat::Hermes;
                (void)(request.tools.forces_call()
                           ? ember::tool_call_grammar(format, request.tools, &budget)
                           : ember::tool_call_lazy_grammar(format, request.tools, &budget));
            }
        }
    } catch (const ApiError&) {
    } catch (const ember::ToolError&) {
    }
    return 0;
}
