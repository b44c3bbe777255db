#include "app/models/chat_models.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "app/models/load_model.h"
#include "app/models/model_locator.h"
#include "app/store/session_adapter.h"
#include "engine/generate/default_template.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace fs = std::filesystem;

namespace {

std::string file_name(const std::string& path) {
    return fs::path(path).filename().string();
}

bool same_file(const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::equivalent(a, b, ec) && !ec;
}

// The messages as the new model gets them: the text only. Reply token ids are the old
// model's (another vocabulary, another template around them), so every message is
// tokenized again under the new model's template.
void copy_messages(const Conversation& from, Conversation& to) {
    for (const ChatMessage& m : from.messages()) {
        if (m.role == "system") {
            to.set_system(m.content);
            continue;
        }
        ChatMessage text_only = m;
        text_only.ids.clear();
        to.add_message(std::move(text_only));
    }
}

}  // namespace

ChatModels::ChatModels(ChatModelSettings settings, ThreadPool& pool)
    : settings_(std::move(settings)), pool_(pool) {}

ChatModels::~ChatModels() = default;

int64_t ChatModels::context_for(const Model& model, bool cap_to_training, std::string& note) const {
    const int64_t trained = model.config().n_ctx_train;
    if (settings_.context <= 0) {
        return default_context_size(model.config(), settings_.conversation.kv_type);
    }
    if (settings_.context <= trained) return settings_.context;
    if (!cap_to_training) {
        throw std::runtime_error("--ctx " + std::to_string(settings_.context) +
                                 " is more than the " + std::to_string(trained) +
                                 " tokens the model was trained for");
    }
    note = "; its context is " + std::to_string(trained) + " tokens, all it was trained for";
    return trained;
}

void ChatModels::open(const std::string& path) {
    model_ = load_model(path, settings_.activations, settings_.gpu);
    path_ = path;
    std::string unused;
    ConversationOptions options = settings_.conversation;
    options.context = context_for(*model_, /*cap_to_training=*/false, unused);
    conversation_ = std::make_unique<Conversation>(*model_, pool_, std::move(options));
}

std::string ChatModels::template_warning() const {
    if (conversation_->uses_model_template() ||
        !conversation_->options().template_override.empty()) {
        return {};
    }
    std::string used = choose_chat_template(model_->gguf(), model_->tokenizer()).description;
    if (used.starts_with("none in the file; ")) used.erase(0, 18);
    return current_name() + " has no chat template; prompts use " + used +
           " (--chat-template FILE gives one; ember run completes plain text)";
}

void ChatModels::attach(ui::LocalChatEngine& engine, ChatSessions& sessions) {
    engine_ = &engine;
    sessions_ = &sessions;
}

std::string ChatModels::current_name() const {
    return file_name(path_);
}

std::vector<std::string> ChatModels::candidates() {
    std::vector<std::string> names;
    for (const FoundModel& m : find_models(model_dirs())) names.push_back(m.name);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string ChatModels::switch_to(const std::string& name, const std::function<bool()>& stop) {
    if (engine_ == nullptr || sessions_ == nullptr) {
        throw std::logic_error("ChatModels::switch_to before attach()");
    }
    // The chat owns the terminal: a hub name is used if pulled, never asked about here.
    const std::string path = resolve_model(name, nullptr, /*may_ask_to_pull=*/false);
    if (same_file(path, path_)) return "already chatting with " + current_name();
    // Everything that can fail comes before anything changes: a name that resolves to
    // nothing, a file that does not load, a record that cannot be written.
    std::unique_ptr<Model> model = load_model(path, settings_.activations, settings_.gpu, stop);
    std::string context_note;
    ConversationOptions options = conversation_->options();
    options.template_override.clear();  // --chat-template was the first model's
    options.context = context_for(*model, /*cap_to_training=*/true, context_note);
    auto conversation = std::make_unique<Conversation>(*model, pool_, std::move(options));
    copy_messages(*conversation_, *conversation);
    engine_->offer_tools_to(*conversation);  // --tools: the new model must take them too
    sessions_->use_model(*model, *conversation, *conversation_);

    // The swap: the engine answers with the new model; the old one goes.
    engine_->rebind(*conversation);
    std::swap(conversation_, conversation);
    std::swap(model_, model);
    path_ = path;
    conversation.reset();  // before the model it refers to
    model.reset();

    size_t messages = 0;
    for (const ChatMessage& m : conversation_->messages()) messages += m.role != "system";
    std::string text = "now chatting with " + current_name();
    if (messages > 0) {
        text += ": the " + std::to_string(messages) +
                (messages == 1 ? " message so far goes" : " messages so far go") +
                " to it in its own chat template at the next turn";
    }
    text += context_note;
    if (const std::string warning = template_warning(); !warning.empty()) {
        text += " (warning: " + warning + ")";
    }
    return text;
}

}  // namespace ember::app
