// Conversations and their messages. Messages form a tree (each has a parent; the first has
// none), so editing a message or regenerating a reply adds a branch instead of losing the
// old one; a conversation remembers its current leaf, and its current branch is the path from
// the root to that leaf. Every message is written in its own transaction the moment it is
// complete. Messages are the source of truth and are never evicted.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sessions/sqlite.h"

namespace ember::sessions {

// Where a reply came from (schema 7; empty in older rows).
struct MessageOrigin {
    std::string model;  // the model file's name
    std::string model_path;
    std::string model_fingerprint;
    std::string settings;  // JSON; empty: not recorded
};

struct ReplyStats {
    int64_t prompt_tokens = 0;
    int64_t tokens_reused = 0;
    int64_t tokens_restored = 0;
    int64_t tokens_evaluated = 0;
    int64_t tokens_generated = 0;
    double prefill_seconds = 0;
    double decode_seconds = 0;
    double ttft_seconds = 0;
    std::string finish;
    std::optional<uint64_t> seed;  // the seed the reply was sampled from (none before v5)
};

// A conversation whose messages do not form a tree (a parent chain that loops, or a parent
// that is missing or in another conversation). Reading its branch throws this, naming it, so
// one damaged conversation is an error about that one while the others still work.
class DamagedConversation : public std::runtime_error {
public:
    DamagedConversation(const std::string& public_id, const std::string& what)
        : std::runtime_error("conversation " + public_id + " is damaged: " + what +
                             " (ember sessions check --repair fixes it)"),
          public_id_(public_id) {}
    const std::string& public_id() const { return public_id_; }

private:
    std::string public_id_;
};

struct ConversationInfo {
    int64_t id = 0;         // row id, internal
    std::string public_id;  // what users type: short hex, unique prefixes accepted
    std::string title;
    std::string model;
    std::string model_fingerprint;
    std::string model_path;  // absolute; empty in conversations saved before schema 5
    std::string system_prompt;
    std::string sampling_json;
    int64_t current_leaf = 0;   // 0: no messages yet
    int64_t turns = 0;          // user messages on the current branch
    int64_t message_count = 0;  // all branches
    std::string created_at;     // UTC, ISO 8601 with milliseconds
    std::string updated_at;
};

struct StoredMessage {
    int64_t id = 0;
    int64_t parent_id = 0;  // 0: a root
    std::string role;
    std::string content;
    std::string thinking;            // a thinking model's reasoning, not part of content
    std::vector<int32_t> token_ids;  // the model's own tokens for a generated reply
    // The stored ids were not a whole number of int32s (a damaged row): token_ids is empty
    // then, and the reply is tokenized again from its text.
    bool token_ids_damaged = false;
    std::string created_at;
    std::optional<ReplyStats> stats;
    // A reply's tool calls as a JSON array of {"id", "name", "arguments"} (empty: none), and
    // for a message of role "tool", the call it answers (schema 6; older rows have neither).
    std::string tool_calls;
    std::string tool_call_id;
    std::string tool_name;
    // Schema 7 (older rows: empty, unknown). A reply: the model that wrote it and the
    // settings it was generated with (JSON, as ConversationInfo::sampling_json). A prompt:
    // what was attached before the typed text (JSON array, see schema.cpp's version 7).
    MessageOrigin origin;
    std::string attachments;
};

struct NewConversation {
    std::string title;  // empty: taken from the first user message
    std::string model;
    std::string model_fingerprint;
    std::string model_path;
    std::string system_prompt;
    std::string sampling_json = "{}";
};

struct NewMessage {
    std::string role;  // system, user, assistant or tool
    std::string content;
    std::string thinking;
    std::span<const int32_t> token_ids;
    const ReplyStats* stats = nullptr;
    std::string tool_calls;  // see StoredMessage
    std::string tool_call_id;
    std::string tool_name;
    MessageOrigin origin;     // a reply's, see StoredMessage
    std::string attachments;  // a prompt's, see StoredMessage
    // Bytes at the start of `content` that the attachments take: the title of a new
    // conversation comes from what follows (what the user typed).
    size_t attached_bytes = 0;
};

struct SearchHit {
    std::string conversation;  // public id
    std::string title;
    int64_t message_id = 0;
    std::string role;
    std::string snippet;  // matches in [brackets]
};

class SessionStore {
public:
    // `db` must outlive the store and be migrated (schema.h).
    explicit SessionStore(Database& db) : db_(db) {}

    ConversationInfo create(const NewConversation& conversation);
    // Adds a message under `parent_id` (0: a root) and makes it the current leaf. Throws when
    // the parent belongs to another conversation.
    int64_t add_message(int64_t conversation_id, int64_t parent_id, const NewMessage& message);
    void set_current_leaf(int64_t conversation_id, int64_t message_id);
    void set_system_prompt(int64_t conversation_id, const std::string& text);
    void rename(int64_t conversation_id, const std::string& title);
    // The model the conversation goes on with (/model in a chat): what --continue, --resume
    // and replay reopen, and whose fingerprint decides whether stored reply ids are reused.
    void set_model(int64_t conversation_id, const std::string& model,
                   const std::string& model_fingerprint, const std::string& model_path);
    // The settings the conversation goes on with (/set, /preset), as JSON: what --continue,
    // --resume and replay restore.
    void set_settings(int64_t conversation_id, const std::string& settings_json);
    void remove(int64_t conversation_id);

    // Most recently updated first.
    std::vector<ConversationInfo> list(int64_t limit);
    // By public id or a unique prefix of one; nullopt when none matches. Throws when the
    // prefix is ambiguous.
    std::optional<ConversationInfo> find(const std::string& id);
    std::optional<ConversationInfo> most_recent();
    // The path from the root to `leaf` (default: the current leaf), root first. Throws
    // DamagedConversation when the parents loop or one is missing: the walk is bounded.
    std::vector<StoredMessage> branch(const ConversationInfo& conversation, int64_t leaf = -1);
    std::vector<StoredMessage> all_messages(int64_t conversation_id);
    // Full-text search over message contents (words, all of which must occur).
    std::vector<SearchHit> search(const std::string& text, int64_t limit);

    std::string export_markdown(const ConversationInfo& conversation);
    // `ascii_only`: every character past ASCII as a \u escape (for a terminal: nothing in it
    // can act as a control, and parsing it still gives the exact text).
    std::string export_json(const ConversationInfo& conversation, bool ascii_only = false);

private:
    ConversationInfo read_info(Statement& s);
    int64_t count_turns(int64_t leaf);
    void touch(int64_t conversation_id);

    Database& db_;
};

// Whether stored reply ids can be fed to a model with `vocab_size` tokens (0: unknown, only
// the length is checked): a damaged row can hold any int32, negative ones included.
bool token_ids_fit(const StoredMessage& message, int64_t vocab_size);

// "2026-01-02T03:04:05.678Z" as local time, "2026-01-02 04:04"; the input when unparsable.
std::string local_time(const std::string& utc_iso8601);

}  // namespace ember::sessions
