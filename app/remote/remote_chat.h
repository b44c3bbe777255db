// `ember chat --remote URL`: the chat front ends over any OpenAI-compatible server (ember
// serve, vLLM, llama.cpp's server, ollama). A ui::ChatEngine whose replies are streamed chat
// completions: the messages live here, the model and its KV state on the server, and each turn
// sends the whole conversation (servers with prefix caching answer it warm).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/remote/client.h"
#include "ui/chat/chat_engine.h"

namespace ember::app {

struct RemoteChatOptions {
    std::string model;               // the model id the requests name
    std::vector<std::string> stops;  // sent as "stop"
    // Sent as chat_template_kwargs.enable_thinking (vLLM, llama.cpp's server); unset: the
    // server's default.
    std::optional<bool> thinking;
    std::string reasoning_effort;  // sent as "reasoning_effort" when set
};

// What a conversation held with a remote model records as its model fingerprint: the API's
// URL and the model id, so `ember replay --regenerate` can find the server again and a local
// model never mistakes it for its own.
std::string remote_fingerprint(const serve::ApiEndpoint& endpoint, const std::string& model);
// The URL and model id back from a fingerprint; nullopt when it is not a remote one.
struct RemoteIdentity {
    std::string url;
    std::string model;
};
std::optional<RemoteIdentity> parse_remote_fingerprint(const std::string& fingerprint);

// The API key from the environment variable `variable` (empty name: no key). Throws naming
// the variable when it is unset or empty.
std::string api_key_from_env(const std::string& variable);

class RemoteChatEngine final : public ui::ChatEngine {
public:
    // `client` must outlive the engine.
    RemoteChatEngine(serve::ApiClient& client, RemoteChatOptions options);

    const std::vector<ChatMessage>& messages() const override { return messages_; }
    void set_system(std::string text) override;
    void add_message(ChatMessage message) override { messages_.push_back(std::move(message)); }
    void pop_message() override;
    bool pop_assistant() override;
    void clear() override { messages_.clear(); }
    // Streams one chat completion. Sampling: temperature, top_p, seed and the OpenAI
    // penalties, plus top_k, min_p and repeat_penalty (which ember serve, llama.cpp's server
    // and vLLM read and others ignore); max_tokens and ignore_eos from `options`.
    ui::ChatReply respond(Sampler& sampler, const GenerateOptions& options,
                          const TextCallback& on_text,
                          const ui::StopRequested& stop_requested) override;
    void set_thinking(bool on, int64_t budget) override;
    std::optional<bool> thinking() const override { return options_.thinking; }
    void set_reasoning_effort(const std::string& effort) override {
        options_.reasoning_effort = effort;
    }
    std::string reasoning_effort() const override { return options_.reasoning_effort; }
    void set_context(int64_t tokens) override;
    int64_t context_size() const override { return 0; }
    int64_t context_used() const override { return context_used_; }

    const std::string& model() const { return options_.model; }

private:
    nlohmann::json request_body(const SamplingParams& sampling,
                                const GenerateOptions& options) const;

    serve::ApiClient& client_;
    RemoteChatOptions options_;
    std::vector<ChatMessage> messages_;
    int64_t context_used_ = 0;
};

}  // namespace ember::app
