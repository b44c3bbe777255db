// The wiring between the chat front ends (ui/) and the session database (sessions/), which
// may not know each other: a ui::SessionBackend over the SQLite store, the prefix-state store
// attached to the conversation, and resuming a saved conversation.
#pragma once

#include <cstdint>
#include <cstdio>
#include <istream>
#include <memory>
#include <optional>
#include <streambuf>
#include <string>

#include "engine/generate/conversation.h"
#include "engine/sampling/sampler.h"
#include "sessions/session_store.h"
#include "sessions/sqlite.h"
#include "sessions/state_store.h"
#include "sessions/state_tier.h"
#include "sessions/tiered_state_store.h"
#include "ui/chat/chat_engine.h"
#include "ui/chat/session_backend.h"

namespace ember {
class Model;
}

namespace ember::app {

inline constexpr const char* kDefaultStateCap = "2GiB";
// The host-memory tier in front of the store (sessions/state_tier.h): recently used
// conversations' state, uncompressed, so switching between them does not read the database.
// About eight conversations of 1,000 tokens on an 8B model with f16 KV, or hundreds on the
// small models; 0 keeps none (every restore reads the database, as before the tier).
inline constexpr const char* kDefaultStateMemory = "1GiB";

// $XDG_DATA_HOME/ember/ember.db, else ~/.local/share/ember/ember.db. Throws when neither
// variable names an absolute directory (then --db must be given).
std::string default_db_path();

// "2GiB", "512M", "1.5g", "4096": bytes. Throws std::invalid_argument naming the text.
uint64_t parse_byte_size(const std::string& text);

// Throws for a --db that names no database file: a "file:" URI or a device, FIFO or socket
// (the same refusal in every command).
void check_db_path(const std::string& path);
// What a command does with the session database.
enum class DbUse {
    write,  // chat, serve, rm, rename, prune, check --repair
    read,   // list, show, search, export, stats, check, replay
};
// A --db the user typed (`db_option`; empty: the default path, which is created with its
// directory on the first run) is checked before it is opened, so a typo never quietly starts
// an empty history: a folder that does not exist is refused (nothing is created), and a file
// that does not exist is refused for reading and, for writing, created with one line on stderr
// saying a new database starts there.
void check_named_db(const std::string& db_option, DbUse use);
// Opens and migrates the database at `path` (check_db_path first), creating its directory
// when missing. A database that cannot be written (the file, the directory that holds its
// -wal and -shm, or the file system is read-only) is never migrated or changed:
// - DbUse::read opens it read-only (sessions::OpenMode::read_only) and says so in one line on
//   stderr; it must then be at this build's schema version (an older one is upgraded by one
//   writable open) or empty;
// - DbUse::write refuses it with one line naming the file, that it is read-only and why,
//   followed by `instead` (what to do) when given.
std::unique_ptr<sessions::Database> open_session_db(const std::string& path,
                                                    DbUse use = DbUse::write,
                                                    const std::string& instead = {});

// What a new conversation records about how it was made.
struct SessionDefaults {
    std::string model;  // the model file's name
    std::string model_fingerprint;
    std::string model_path;  // absolute (empty: a remote model)
    std::string sampling_json = "{}";
    // Stored reply ids with one at or past this are damaged and not reused (0: a remote
    // model, whose ids are never reused anyway).
    int64_t vocab_size = 0;
};

class SqliteSessionBackend final : public ui::SessionBackend {
public:
    SqliteSessionBackend(sessions::Database& db, SessionDefaults defaults, uint64_t state_cap);

    void new_session(const std::string& system_prompt) override;
    std::string current_id() const override;
    using ui::SessionBackend::commit;
    int64_t commit(const ChatMessage& message, int64_t parent_id, const TurnResult* turn,
                   const ui::MessageNotes& notes) override;
    void record_settings(const ui::ChatSettings& settings) override;
    void set_system_prompt(const std::string& text) override;
    void rename(const std::string& title) override;
    std::vector<ui::SessionSummary> list(int64_t limit) override;
    std::optional<ui::LoadedSession> load(const std::string& id) override;
    void export_markdown(const std::string& path) override;
    std::string stats_text() override;

    // Later replies come from another model (/model): new conversations record it, and the
    // current one (when saved) is marked as going on with it. Throws when the write fails
    // (then nothing changed).
    void set_model(const SessionDefaults& model);
    const SessionDefaults& defaults() const { return defaults_; }

    // The host-memory tier's figures go into stats_text() too (null: none).
    void set_state_tier(const sessions::StateTier* tier) { tier_ = tier; }

    // The conversation `--continue` resumes: the most recently updated one.
    std::optional<std::string> most_recent_id();
    // A commit or system-prompt write failed (the caller reported it and stopped recording).
    bool write_failed() const { return write_failed_; }

private:
    // commit() without the bookkeeping of failures.
    int64_t record(const ChatMessage& message, int64_t parent_id, const TurnResult* turn,
                   const ui::MessageNotes& notes);

    sessions::Database& db_;
    sessions::SessionStore store_;
    SessionDefaults defaults_;
    uint64_t state_cap_;
    const sessions::StateTier* tier_ = nullptr;
    std::string pending_system_;  // for the conversation created by the first commit
    // The settings replies are generated with now (JSON, see chat_settings.h): the start's,
    // then what record_settings() wrote over them.
    std::string settings_json_;
    std::optional<sessions::ConversationInfo> current_;
    bool write_failed_ = false;
};

// The sampling settings and what else decides a reply (the template switches, the thinking
// budget, stop strings, context, KV type and the reply's token limit), stored with a
// conversation so `ember replay --regenerate` can run its turns again the way they were
// generated.
std::string chat_settings_json(const SamplingParams& sampling, const ConversationOptions& chat,
                               int64_t max_tokens, const SpeculationOptions& speculation = {});

// A reply's tool calls as the store keeps them (a JSON array of {"id", "name", "arguments"};
// empty for none), and back (what does not parse as calls is none).
std::string tool_calls_to_json(const std::vector<ToolCall>& calls);
std::vector<ToolCall> tool_calls_from_json(const std::string& stored);

// A summary line for `ember sessions list` and /sessions.
ui::SessionSummary summarize(const sessions::ConversationInfo& info);

// Everything `ember chat` needs from the session database, built from its options.
struct ChatSessionOptions {
    std::string db_path;  // empty: the default path
    bool no_db = false;
    bool scripted = false;  // scripted runs use a database only when one is named
    std::string resume_id;
    bool continue_last = false;
    std::string state_cap = kDefaultStateCap;
    std::string state_memory = kDefaultStateMemory;  // the tier's bound ("0": no tier)
    KvType kv_type = KvType::F32;
    SamplingParams sampling;
    int64_t max_tokens = 0;          // the chat's -n (recorded for replay)
    SpeculationOptions speculation;  // recorded too: a sampled reply's draws depend on it
};

class ChatSessions {
public:
    // Opens the database unless none is wanted, attaches the prefix-state store to
    // `conversation` (warnings go to `err`) and finds the conversation to resume. Throws with
    // a clear message for a bad database or an unknown id.
    ChatSessions(const ChatSessionOptions& options, const Model& model, Conversation& conversation,
                 std::FILE* err);
    // The same for a conversation with a remote model: messages only, recorded with
    // `defaults` (the server holds any prompt state, so no state store is attached).
    ChatSessions(const ChatSessionOptions& options, SessionDefaults defaults, std::FILE* err);
    ~ChatSessions();

    ui::SessionBackend& backend();
    bool enabled() const { return db_ != nullptr; }
    // The conversation to resume (--resume/--continue), resolved to its full id; empty: none.
    const std::string& resume_id() const { return resume_id_; }
    // Where the database is and the state cap ("" and 0 without one); whether this run
    // created the file (the first run: the chat says where it keeps things).
    const std::string& path() const { return path_; }
    uint64_t state_cap() const { return cap_; }
    // The host-memory tier (null without a database or with --state-memory 0).
    const sessions::StateTier* state_tier() const { return tier_.get(); }
    bool created() const { return created_; }
    // /model: from now on `conversation` (holding the same messages as `previous`) answers
    // with `model`. The conversation is recorded as going on with it, `previous`'s pending
    // state goes into its own model's store, and `conversation` gets a store keyed to
    // `model` (each model's state rows apart). Throws when the record cannot be written;
    // nothing has changed then.
    void use_model(const Model& model, Conversation& conversation, Conversation& previous);

    // Loads the resumed conversation into `conversation` (scripted mode; the interactive
    // front end loads it through its controller) and returns the id of its last message.
    int64_t load_into(ui::ChatEngine& conversation);
    // The settings the conversation load_into() loaded went on with (nullopt: none stored).
    const std::optional<ui::ChatSettings>& resumed_settings() const { return resumed_settings_; }

private:
    // Opens the database when one is wanted (false: none is); throws for --resume without one.
    bool open_database(const ChatSessionOptions& options);
    // The backend recording with `defaults`, and the conversation to resume.
    void set_up_backend(const ChatSessionOptions& options, SessionDefaults defaults, bool remote);
    // A prefix-state store keyed to `model`, its warnings printed once each.
    std::unique_ptr<sessions::StateStore> make_state_store(const Model& model);
    // Gives `conversation` a store keyed to `model`: the database's, behind the tier if any.
    void attach_state_store(const Model& model, Conversation& conversation);
    // What a conversation with `model` records about how it was made.
    SessionDefaults defaults_for(const Model& model, const Conversation& conversation) const;

    ChatSessionOptions options_;
    std::unique_ptr<sessions::Database> db_;
    std::unique_ptr<sessions::StateTier> tier_;  // before the stores that use it
    std::unique_ptr<sessions::StateStore> state_;
    std::unique_ptr<sessions::TieredStateStore> tiered_;  // over state_ and tier_
    std::unique_ptr<SqliteSessionBackend> sqlite_backend_;
    ui::NullSessionBackend null_backend_;
    std::string resume_id_;
    std::string path_;
    uint64_t cap_ = 0;
    bool created_ = false;
    std::FILE* err_;
    std::string last_state_warning_;  // the state store's last warning, not printed twice
    std::optional<ui::ChatSettings> resumed_settings_;
};

}  // namespace ember::app
