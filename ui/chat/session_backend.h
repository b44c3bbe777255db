// What the chat front ends (line mode, curses, scripted) need from a session store, as an
// interface: `ui/` may not depend on `sessions/` (dependencies point down, app wires them),
// so app/ adapts the SQLite store to this. A null backend (no --db, tests) records nothing.
//
// Messages form a tree: every message has a parent (0 for the first). Regenerating a reply
// commits a new assistant message under the same user message; editing a user message
// commits a new user message under the old one's parent. The front end keeps the ids of the
// current path (one per conversation message) and passes the right parent.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/sampling/sampler.h"

namespace ember::ui {

struct SessionSummary {
    std::string id;  // stable, short, typeable (Tab-completed)
    std::string title;
    std::string model;
    std::string model_path;  // absolute; empty: unknown (older ember, a remote model)
    int64_t turns = 0;       // user messages on the current branch
    std::string updated;     // ISO 8601, local time
};

// Something attached before a prompt's typed text (/file, /run, -f): shown collapsed, by its
// heading and size. `length`: the bytes of the message's content it takes (with its fence
// and the blank line after it), so the typed text starts after all of them.
struct AttachmentNote {
    std::string heading;  // "File: notes.txt", "Output of: ls"
    int64_t bytes = 0;    // of the attached text
    int64_t length = 0;
};

// What a message carries besides its text: a prompt's attachments, a reply's model.
struct MessageNotes {
    std::vector<AttachmentNote> attachments;
    std::string model;  // the reply's model (file name); empty: unknown
};

// The settings that decide a reply and that /set and /preset change, stored with the
// conversation (and with each reply) so --continue, --resume, /load and replay restore them.
struct ChatSettings {
    SamplingParams sampling;
    std::optional<uint64_t> fixed_seed;  // the next reply's seed when fixed (/set seed, --seed)
    int64_t max_tokens = -1;
    bool ignore_eos = false;
    std::optional<bool> think;  // unset: the template's default
    int64_t thinking_budget = -1;
    std::string reasoning_effort;
    int64_t context = 0;  // 0: unknown (a remote server's)
};

struct LoadedSession {
    SessionSummary summary;
    std::string system_prompt;
    // The current branch, root first; ids[i] is the store's id of messages[i], notes[i] what
    // else it carries.
    std::vector<ChatMessage> messages;
    std::vector<int64_t> message_ids;
    std::vector<MessageNotes> notes;
    // The settings the conversation went on with; nullopt: none stored that can be read.
    std::optional<ChatSettings> settings;
};

class SessionBackend {
public:
    virtual ~SessionBackend() = default;

    // Starts a new conversation; it is written when its first message is committed.
    virtual void new_session(const std::string& system_prompt) = 0;
    // Id of the current conversation, empty before its first commit.
    virtual std::string current_id() const = 0;
    // Commits a complete message (a cancelled reply is complete as far as it got) under
    // `parent_id` (0: a root) and returns its id. `turn` carries the reply's stats.
    // `notes.attachments`: what a prompt's content begins with (a reply's model is the
    // backend's own record of the model answering).
    virtual int64_t commit(const ChatMessage& message, int64_t parent_id, const TurnResult* turn,
                           const MessageNotes& notes) = 0;
    int64_t commit(const ChatMessage& message, int64_t parent_id, const TurnResult* turn) {
        return commit(message, parent_id, turn, MessageNotes{});
    }
    // The settings later replies are generated with: stored with the conversation (when it is
    // saved, and at its first commit) and with each reply. Throws when the write fails.
    virtual void record_settings(const ChatSettings& settings) = 0;
    virtual void set_system_prompt(const std::string& text) = 0;
    virtual void rename(const std::string& title) = 0;

    virtual std::vector<SessionSummary> list(int64_t limit) = 0;
    // Opens a stored conversation (makes it current); nullopt when `id` names none.
    virtual std::optional<LoadedSession> load(const std::string& id) = 0;
    // Writes the current conversation as Markdown to `path`; throws with a message on failure.
    virtual void export_markdown(const std::string& path) = 0;
    // One or more lines describing sizes, hit rates and eviction, for /stats.
    virtual std::string stats_text() = 0;
};

// Records nothing; used when no database is wanted.
class NullSessionBackend final : public SessionBackend {
public:
    void new_session(const std::string&) override {}
    std::string current_id() const override { return {}; }
    using SessionBackend::commit;
    int64_t commit(const ChatMessage&, int64_t parent_id, const TurnResult*,
                   const MessageNotes&) override {
        return parent_id + 1;
    }
    void record_settings(const ChatSettings&) override {}
    void set_system_prompt(const std::string&) override {}
    void rename(const std::string&) override {}
    std::vector<SessionSummary> list(int64_t) override { return {}; }
    std::optional<LoadedSession> load(const std::string&) override { return std::nullopt; }
    void export_markdown(const std::string&) override {
        throw std::runtime_error("no session database is open (start with --db PATH)");
    }
    std::string stats_text() override { return "no session database"; }
};

}  // namespace ember::ui
