// The local model of one `ember chat` and its Conversation, and /model NAME: going on with
// another model. The messages so far move to a new Conversation of the new model, which
// renders them with its own chat template and evaluates them from scratch or from its own
// stored state (ChatSessions keys a store to each model); the old model's live state is
// never used for the new one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/models/gpu_options.h"
#include "engine/generate/conversation.h"
#include "ui/chat/chat_engine.h"
#include "ui/chat/model_switcher.h"

namespace ember {
class Model;
class ThreadPool;
}  // namespace ember

namespace ember::app {

class ChatSessions;

// What every model of the chat is loaded and run with.
struct ChatModelSettings {
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    int64_t context = 0;               // --ctx; 0: each model's default_context_size()
    // The first model's conversation options (context filled in per model); a later model
    // takes the options in effect when it is switched to (/set think, ... carry over).
    ConversationOptions conversation;
};

class ChatModels final : public ui::ModelSwitcher {
public:
    // `pool` must outlive this.
    ChatModels(ChatModelSettings settings, ThreadPool& pool);
    ~ChatModels() override;
    ChatModels(const ChatModels&) = delete;
    ChatModels& operator=(const ChatModels&) = delete;

    // Loads the chat's first model and makes its Conversation. Throws as -m does (a file
    // that does not load, --ctx past what the model was trained for).
    void open(const std::string& path);
    const Model& model() const { return *model_; }
    Conversation& conversation() { return *conversation_; }
    // A warning when the model answering has no chat template of its own (prompts use a
    // fallback it may not answer to); empty when it has one or --chat-template gives one.
    std::string template_warning() const;

    // What a switch rewires: the engine the front ends talk to (rebound to the new
    // Conversation) and the sessions that record the conversation and key the state store.
    // Both must outlive this; until attached, switch_to() refuses.
    void attach(ui::LocalChatEngine& engine, ChatSessions& sessions);

    std::string current_name() const override;
    std::string current_path() const override { return path_; }
    std::vector<std::string> candidates() override;
    std::string switch_to(const std::string& name, const std::function<bool()>& stop = {}) override;

private:
    // The context `model` runs with: --ctx (capped at what it was trained for when
    // `cap_to_training`, else refused past it), else its default. `note` says why it was cut.
    int64_t context_for(const Model& model, bool cap_to_training, std::string& note) const;

    ChatModelSettings settings_;
    ThreadPool& pool_;
    std::unique_ptr<Model> model_;
    std::string path_;
    std::unique_ptr<Conversation> conversation_;
    ui::LocalChatEngine* engine_ = nullptr;
    ChatSessions* sessions_ = nullptr;
};

}  // namespace ember::app
