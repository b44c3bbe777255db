// The OpenAI-compatible API's wire format, apart from HTTP: request bodies parsed and
// checked into plain structs (every bad field a clear ApiError naming it), and the JSON the
// server answers with. Nothing here runs a model, so all of it can be tested alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/generate/constrained.h"
#include "engine/generate/conversation.h"
#include "engine/generate/tool_calls.h"
#include "engine/grammar/grammar.h"
#include "engine/sampling/sampler.h"

namespace ember::serve {

// An error as the API reports it: {"error": {"message", "type", "param", "code"}} with an
// HTTP status.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string code = {},
             std::string type = {});
    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }
    const std::string& type() const { return type_; }

private:
    int status_;
    std::string param_, code_, type_;
};

// The error body for `e`.
nlohmann::json error_json(const ApiError& e);
// Dumps JSON for the wire; invalid UTF-8 (which the engine never produces) is replaced
// rather than throwing.
std::string dump_json(const nlohmann::json& j);

struct RequestLimits {
    int64_t max_messages = 4096;
    int64_t max_nesting = 64;  // JSON nesting depth (deeper bodies are refused while parsing)
    int64_t max_stop_strings = 4;
    int64_t max_stop_bytes = 256;
    // Compiling a request's response_format or tool schemas (under its slot) may take this
    // long at most: past it, 400.
    std::chrono::milliseconds compile_time{10000};
};

// The sampling and length fields a request may carry; unset fields keep the server's
// defaults.
struct SamplingRequest {
    std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty,
        repeat_penalty;
    std::optional<int64_t> top_k;
    std::optional<uint64_t> seed;
    std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool ignore_eos = false;     // llama.cpp's and vLLM's extension: generate past end of turn
    // response_format json_object or json_schema (Free: free text), checked but not compiled
    // yet: compile_response_format() does that once the request holds a slot.
    OutputFormat response_format;
};

struct ChatRequest {
    std::string model;                  // empty: not given
    std::vector<ChatMessage> messages;  // tool results and assistant tool_calls included
    SamplingRequest sampling;
    // tools, tool_choice, parallel_tool_calls (tools empty: none offered). The tools keep the
    // body's key order: templates print them with tojson.
    ToolOptions tools;
};

struct CompletionRequest {
    std::string model;
    std::string prompt;
    SamplingRequest sampling;
};

// Parse a request body; throw ApiError (400) naming the field for malformed JSON, a wrong
// type, an out-of-range value or an unsupported feature.
ChatRequest parse_chat_request(const std::string& body, const RequestLimits& limits);
CompletionRequest parse_completion_request(const std::string& body, const RequestLimits& limits);

// The grammar of a request's response_format (null: free text), compiled within `budget`.
// A schema feature Ember does not support, or a limit of the budget passed, is a 400 naming
// the field and the keyword or limit, never ignored; grammar::CompileCancelled passes through.
std::shared_ptr<const grammar::Grammar> compile_response_format(const OutputFormat& format,
                                                                grammar::CompileBudget* budget);

// The server's defaults with the request's fields applied; throws ApiError for a
// combination the sampler refuses.
SamplingParams sampling_for(const SamplingRequest& request, const SamplingParams& defaults);

// "stop", "length" (the context counts as a length limit).
std::string finish_reason_text(FinishReason reason);
// As above, and "tool_calls" for a reply that ended having called functions.
std::string finish_reason_text(const TurnResult& turn);

// message.tool_calls of a reply: [{"id", "type": "function", "function": {"name", "arguments"}}].
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);
// A streamed piece of a call as delta.tool_calls holds it: the first with id, type and name.
nlohmann::json tool_call_delta_json(const ToolCallDelta& delta);

// usage: prompt/completion/total tokens and the reused prompt tokens
// (prompt_tokens_details.cached_tokens).
nlohmann::json usage_json(const TurnResult& turn);
// Ember's own account of a reply: where its prompt came from (ignored by other clients).
nlohmann::json ember_json(const TurnResult& turn, int slot);

}  // namespace ember::serve
