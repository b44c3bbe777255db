#include "app/store/session_adapter.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "app/store/chat_settings.h"
#include "app/store/state_stats_text.h"
#include "engine/model/model.h"
#include "engine/util/bounded_json.h"
#include "engine/util/xdg_paths.h"
#include "sessions/schema.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace fs = std::filesystem;

std::string default_db_path() {
    const std::string data = xdg_data_home();
    if (data.empty()) {
        throw std::runtime_error(
            "no session database location: set XDG_DATA_HOME or HOME, or give --db PATH");
    }
    return data + "/ember/ember.db";
}

uint64_t parse_byte_size(const std::string& text) {
    size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string unit;
    for (size_t i = used; i < text.size(); ++i) {
        if (!std::isspace(static_cast<unsigned char>(text[i]))) {
            unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
        }
    }
    double scale = 0;
    if (unit.empty() || unit == "b") scale = 1;
    if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
    if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
    if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
    if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
    if (used == 0 || scale == 0 || !(value >= 0) || value * scale > 1.8e19) {
        throw std::invalid_argument("'" + text +
                                    "' is not a size (a number with an optional unit: K, M, G, "
                                    "T in powers of 1024, e.g. 2GiB)");
    }
    return static_cast<uint64_t>(value * scale);
}

// What a --db path may name: a database file (or none yet), or ":memory:". SQLite would also
// take a "file:" URI (Debian builds it with URIs on) and a device: /dev/null as a database
// fails at the first commit and leaves a /dev/null-journal beside the device. Every command
// refuses both alike, before SQLite sees them.
void check_db_path(const std::string& path) {
    if (path == ":memory:") return;
    if (path.starts_with("file:")) {
        throw std::runtime_error("session database '" + path +
                                 "': SQLite URIs are not taken; give the file's path (./" + path +
                                 " for a file whose name starts with file:)");
    }
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || st.type() == fs::file_type::not_found || st.type() == fs::file_type::regular ||
        st.type() == fs::file_type::directory) {
        return;  // a directory has its own message below; other failures are SQLite's
    }
    const char* kind = st.type() == fs::file_type::character || st.type() == fs::file_type::block
                           ? "a device"
                       : st.type() == fs::file_type::fifo   ? "a FIFO"
                       : st.type() == fs::file_type::socket ? "a socket"
                                                            : "not a regular file";
    throw std::runtime_error("session database '" + path + "' is " + kind +
                             ", not a database file (--no-db chats without saving)");
}

void check_named_db(const std::string& db_option, DbUse use) {
    if (db_option.empty() || db_option == ":memory:") return;
    check_db_path(db_option);
    std::error_code ec;
    if (fs::exists(db_option, ec)) return;
    const fs::path parent = fs::path(db_option).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
        throw std::runtime_error("session database '" + db_option + "': the folder '" +
                                 parent.string() +
                                 "' does not exist (a typo? create it first to start a new "
                                 "database there)");
    }
    if (use == DbUse::read) throw std::runtime_error("no session database at " + db_option);
    ui::TextWriter(stderr)
        .raw("ember: no session database at ")
        .text(db_option)
        .raw(" yet: starting a new one there\n");
}

namespace {

// Why the existing database file at `path` cannot be written, or empty when it can. SQLite
// writes the file and creates its -wal and -shm (or -journal) beside it, so the directory
// must be writable too, unless those files exist and are writable themselves.
std::string why_unwritable(const std::string& path) {
    struct statvfs vfs {};
    if (::statvfs(path.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0) {
        return "a read-only file system";
    }
    // access() as the real user: root is refused only what root cannot write (an immutable
    // file, a read-only mount).
    if (::access(path.c_str(), W_OK) != 0) return "the file cannot be written";
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        const std::string wal = path + "-wal", shm = path + "-shm";
        if (::access(wal.c_str(), W_OK) != 0 || ::access(shm.c_str(), W_OK) != 0) {
            return "its directory cannot be written, and SQLite keeps its -wal and -shm "
                   "files there";
        }
    }
    return {};
}

std::string read_only_line(const std::string& path, const std::string& why) {
    return "session database '" + path + "' is read-only (" + why + ")";
}

// The database opened for reading only: checked, never migrated.
std::unique_ptr<sessions::Database> open_read_only(const std::string& path,
                                                   const std::string& why) {
    auto db = std::make_unique<sessions::Database>(path, sessions::OpenMode::read_only);
    const int version = db->user_version();
    if (version < 0 || version > sessions::kSchemaVersion) {
        sessions::migrate(*db);  // refuses an unknown version before it writes anything
    }
    bool empty = false;
    if (version == 0) {
        auto tables = db->prepare("SELECT count(*) FROM sqlite_master");
        tables.step();
        empty = tables.column_int(0) == 0;
    }
    if (version != sessions::kSchemaVersion && !empty) {
        throw std::runtime_error(
            read_only_line(path, why) + " and at schema version " + std::to_string(version) +
            ", which this ember reads only after "
            "upgrading it to " +
            std::to_string(sessions::kSchemaVersion) + ": open it once where it can be written");
    }
    ui::TextWriter(stderr)
        .raw("session database '")
        .text(path)
        .raw("' is read-only (")
        .raw(why)
        .raw(db->immutable() ? "; read as immutable: no -wal beside it" : "")
        .raw("): reading it as it is, nothing is written\n");
    if (empty) {  // a file with no tables yet: nothing saved, as for a missing file
        auto memory = std::make_unique<sessions::Database>(":memory:");
        sessions::migrate(*memory);
        return memory;
    }
    return db;
}

}  // namespace

std::unique_ptr<sessions::Database> open_session_db(const std::string& path, DbUse use,
                                                    const std::string& instead) {
    check_db_path(path);
    const auto refuse = [&](const std::string& why) {
        throw std::runtime_error(read_only_line(path, why) +
                                 (instead.empty() ? ": it cannot be written" : "; " + instead));
    };
    std::error_code ec;
    if (path != ":memory:" && fs::exists(path, ec) && !fs::is_directory(path, ec)) {
        const std::string why = why_unwritable(path);
        if (!why.empty()) {
            if (use == DbUse::write) refuse(why);
            return open_read_only(path, why);
        }
    }
    if (path != ":memory:") {
        const fs::path dir = fs::path(path).parent_path();
        if (!dir.empty() && !fs::exists(dir, ec)) {
            fs::create_directories(dir, ec);
            if (ec) {
                throw std::runtime_error("session database '" + path +
                                         "': cannot create its directory: " + ec.message());
            }
        }
        if (fs::is_directory(path, ec)) {
            throw std::runtime_error("session database '" + path + "' is a directory");
        }
    }
    if (path != ":memory:" && !fs::exists(path, ec)) {
        const fs::path parent = fs::path(path).parent_path();
        const std::string dir = parent.empty() ? "." : parent.string();
        if (::access(dir.c_str(), W_OK | X_OK) != 0) {
            throw std::runtime_error("session database '" + path +
                                     "' cannot be created: its directory '" + dir +
                                     "' is read-only" + (instead.empty() ? "" : "; " + instead));
        }
    }
    auto db = std::make_unique<sessions::Database>(path);
    if (db->read_only()) {  // SQLite found it read-only where access() did not
        const std::string why = "SQLite opened it read-only";
        if (use == DbUse::write) refuse(why);
        db.reset();
        return open_read_only(path, why);
    }
    sessions::migrate(*db);
    return db;
}

std::string tool_calls_to_json(const std::vector<ToolCall>& calls) {
    if (calls.empty()) return {};
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const ToolCall& call : calls) {
        out.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
    }
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<ToolCall> tool_calls_from_json(const std::string& stored) {
    std::vector<ToolCall> calls;
    if (stored.empty()) return calls;
    // The column is text anyone with the file can edit: what is not a list of calls is none.
    const auto parsed = try_parse_json_bounded<nlohmann::json>(stored);
    if (!parsed.is_array()) return calls;
    for (const auto& call : parsed) {
        if (!call.is_object()) continue;
        const auto text = [&](const char* key) {
            return call.contains(key) && call[key].is_string() ? call[key].get<std::string>()
                                                               : std::string();
        };
        calls.push_back({text("id"), text("name"), text("arguments")});
    }
    return calls;
}

ui::SessionSummary summarize(const sessions::ConversationInfo& info) {
    ui::SessionSummary s;
    s.id = info.public_id;
    s.title = info.title;
    s.model = info.model;
    s.turns = info.turns;
    s.updated = sessions::local_time(info.updated_at);
    s.model_path = info.model_path;
    return s;
}

SqliteSessionBackend::SqliteSessionBackend(sessions::Database& db, SessionDefaults defaults,
                                           uint64_t state_cap)
    : db_(db),
      store_(db),
      defaults_(std::move(defaults)),
      state_cap_(state_cap),
      settings_json_(defaults_.sampling_json) {}

void SqliteSessionBackend::new_session(const std::string& system_prompt) {
    current_.reset();
    pending_system_ = system_prompt;
}

std::string SqliteSessionBackend::current_id() const {
    return current_ ? current_->public_id : std::string();
}

int64_t SqliteSessionBackend::commit(const ChatMessage& message, int64_t parent_id,
                                     const TurnResult* turn, const ui::MessageNotes& notes) {
    try {
        return record(message, parent_id, turn, notes);
    } catch (const std::exception&) {
        write_failed_ = true;
        throw;
    }
}

void SqliteSessionBackend::record_settings(const ui::ChatSettings& settings) {
    const std::string updated = settings_with(settings_json_, settings);
    if (current_ && updated != current_->sampling_json) {
        try {
            store_.set_settings(current_->id, updated);
        } catch (const std::exception&) {
            write_failed_ = true;
            throw;
        }
        current_->sampling_json = updated;
    }
    settings_json_ = updated;
}

int64_t SqliteSessionBackend::record(const ChatMessage& message, int64_t parent_id,
                                     const TurnResult* turn, const ui::MessageNotes& notes) {
    if (!current_) {
        sessions::NewConversation n;
        n.model = defaults_.model;
        n.model_fingerprint = defaults_.model_fingerprint;
        n.model_path = defaults_.model_path;
        n.system_prompt = pending_system_;
        n.sampling_json = settings_json_;
        current_ = store_.create(n);
    }
    sessions::ReplyStats stats;
    if (turn != nullptr) {
        stats.prompt_tokens = turn->prompt_tokens;
        stats.tokens_reused = turn->tokens_reused;
        stats.tokens_restored = turn->tokens_restored;
        stats.tokens_evaluated = turn->tokens_evaluated;
        // A remote server's reply has no token ids here; its count is the server's.
        stats.tokens_generated = turn->ids.empty() ? turn->stats.generated_tokens
                                                   : static_cast<int64_t>(turn->ids.size());
        stats.prefill_seconds = turn->stats.prefill_seconds;
        stats.decode_seconds = turn->stats.decode_seconds;
        stats.ttft_seconds = turn->stats.ttft_seconds;
        stats.finish = std::string(finish_reason_name(turn->finish));
        stats.seed = turn->seed;
    }
    sessions::NewMessage m;
    m.role = message.role;
    m.content = message.content;
    m.thinking = message.thinking;
    m.token_ids = message.ids;
    m.stats = turn != nullptr ? &stats : nullptr;
    m.tool_calls = tool_calls_to_json(message.tool_calls);
    m.tool_call_id = message.tool_call_id;
    m.tool_name = message.name;
    if (message.role == "assistant") {
        // Who wrote it, and how: the model answering now and the settings in force.
        m.origin = {defaults_.model, defaults_.model_path, defaults_.model_fingerprint,
                    settings_json_};
    }
    m.attachments = attachments_to_json(notes.attachments);
    for (const ui::AttachmentNote& a : notes.attachments) {
        m.attached_bytes += static_cast<size_t>(std::max<int64_t>(0, a.length));
    }
    const int64_t id = store_.add_message(current_->id, parent_id, m);
    current_->current_leaf = id;
    return id;
}

void SqliteSessionBackend::set_system_prompt(const std::string& text) {
    pending_system_ = text;
    if (!current_) return;
    try {
        store_.set_system_prompt(current_->id, text);
    } catch (const std::exception&) {
        write_failed_ = true;
        throw;
    }
}

void SqliteSessionBackend::rename(const std::string& title) {
    if (!current_) {
        throw std::runtime_error(
            "the conversation is not saved yet (it is saved with its first message)");
    }
    store_.rename(current_->id, title);
    current_->title = title;
}

std::vector<ui::SessionSummary> SqliteSessionBackend::list(int64_t limit) {
    std::vector<ui::SessionSummary> out;
    for (const auto& info : store_.list(limit)) out.push_back(summarize(info));
    return out;
}

std::optional<ui::LoadedSession> SqliteSessionBackend::load(const std::string& id) {
    std::optional<sessions::ConversationInfo> info = store_.find(id);
    if (!info) return std::nullopt;
    ui::LoadedSession loaded;
    loaded.summary = summarize(*info);
    loaded.system_prompt = info->system_prompt;
    // Reply token ids belong to the model that generated them; under another model only the
    // text carries over.
    const bool same_model = info->model_fingerprint == defaults_.model_fingerprint;
    for (auto& m : store_.branch(*info)) {
        ChatMessage message;
        message.role = m.role;
        message.content = std::move(m.content);
        message.thinking = std::move(m.thinking);
        message.tool_calls = tool_calls_from_json(m.tool_calls);
        message.tool_call_id = std::move(m.tool_call_id);
        message.name = std::move(m.tool_name);
        // Damaged ids (not a list of ids, or past the vocabulary) would fail the turn that
        // feeds them to the model, every time: the text is tokenized again instead.
        if (same_model && sessions::token_ids_fit(m, defaults_.vocab_size)) {
            message.ids = std::move(m.token_ids);
        }
        ui::MessageNotes notes;
        notes.attachments = attachments_from_json(m.attachments);
        notes.model = std::move(m.origin.model);
        loaded.messages.push_back(std::move(message));
        loaded.message_ids.push_back(m.id);
        loaded.notes.push_back(std::move(notes));
    }
    loaded.settings = settings_from(info->sampling_json);
    // Later replies record what the conversation goes on with (the controller restores these
    // settings and records them again, with anything a flag changed).
    settings_json_ = info->sampling_json;
    current_ = std::move(info);
    pending_system_ = loaded.system_prompt;
    return loaded;
}

void SqliteSessionBackend::export_markdown(const std::string& path) {
    if (!current_) throw std::runtime_error("nothing to export: the conversation is empty");
    std::ofstream out(path, std::ios::binary);
    out << store_.export_markdown(*current_);
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + path + "'");
}

std::string SqliteSessionBackend::stats_text() {
    std::string text = "database " + db_.path() + "\n";
    text += state_stats_text(sessions::read_state_stats(db_), state_cap_);
    if (tier_ != nullptr) text += state_tier_text(tier_->stats());
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

void SqliteSessionBackend::set_model(const SessionDefaults& model) {
    if (current_) {
        try {
            store_.set_model(current_->id, model.model, model.model_fingerprint, model.model_path);
        } catch (const std::exception&) {
            write_failed_ = true;
            throw;
        }
        current_->model = model.model;
        current_->model_fingerprint = model.model_fingerprint;
        current_->model_path = model.model_path;
    }
    defaults_ = model;
}

std::optional<std::string> SqliteSessionBackend::most_recent_id() {
    auto info = store_.most_recent();
    if (!info) return std::nullopt;
    return info->public_id;
}

std::string chat_settings_json(const SamplingParams& p, const ConversationOptions& c,
                               int64_t max_tokens, const SpeculationOptions& speculation) {
    nlohmann::ordered_json j = {{"temperature", decimal(p.temperature)},
                                {"top_k", p.top_k},
                                {"top_p", decimal(p.top_p)},
                                {"min_p", decimal(p.min_p)},
                                {"repeat_penalty", decimal(p.repeat_penalty)},
                                {"presence_penalty", decimal(p.presence_penalty)},
                                {"frequency_penalty", decimal(p.frequency_penalty)},
                                {"penalty_last_n", p.penalty_last_n},
                                {"seed", p.seed}};
    j["chat"] = {
        {"template_vars", c.template_vars},
        {"max_thinking_tokens", c.max_thinking_tokens},
        {"stop_strings", c.stop_strings},
        {"context", c.context},
        {"kv_type", kv_type_name(c.kv_type)},
        {"template_override", !c.template_override.empty()},
        {"max_tokens", max_tokens},
        {"speculation", {{"enabled", speculation.enabled}, {"draft_max", speculation.draft_max}}}};
    return j.dump();
}

bool ChatSessions::open_database(const ChatSessionOptions& o) {
    const bool resuming = !o.resume_id.empty() || o.continue_last;
    if (o.no_db) {
        if (resuming) throw std::runtime_error("--resume/--continue need a session database");
        return false;
    }
    // A pipe of prompts is recorded only where a database is asked for, so batch runs do not
    // fill the conversation list (and scripted tests do not depend on the user's history).
    if (o.scripted && o.db_path.empty() && !resuming) return false;
    path_ = o.db_path.empty() ? default_db_path() : o.db_path;
    cap_ = parse_byte_size(o.state_cap);
    if (const uint64_t memory = parse_byte_size(o.state_memory); memory > 0) {
        tier_ = std::make_unique<sessions::StateTier>(memory);
    }
    std::error_code ec;
    created_ = path_ != ":memory:" && !fs::exists(path_, ec);
    // Refused before the model answers, rather than a reply that is then not saved.
    db_ = open_session_db(path_, DbUse::write, "--no-db chats without saving");
    if (db_->read_only()) {
        throw std::runtime_error("session database '" + path_ +
                                 "' cannot be written (a read-only file or file system); "
                                 "--no-db chats without saving");
    }
    return true;
}

void ChatSessions::set_up_backend(const ChatSessionOptions& o, SessionDefaults defaults,
                                  bool remote) {
    const std::string fingerprint = defaults.model_fingerprint;
    const std::string model = defaults.model;
    sqlite_backend_ = std::make_unique<SqliteSessionBackend>(*db_, std::move(defaults), cap_);
    if (!remote) sqlite_backend_->set_state_tier(tier_.get());

    sessions::SessionStore store(*db_);
    std::optional<sessions::ConversationInfo> info;
    if (!o.resume_id.empty()) {
        info = store.find(o.resume_id);
        if (!info) {
            throw std::runtime_error("no saved conversation '" + o.resume_id + "' in " + path_ +
                                     " (ember sessions list shows them)");
        }
    } else if (o.continue_last) {
        info = store.most_recent();
        if (!info) throw std::runtime_error("no saved conversation to continue in " + path_);
    }
    if (!info) return;
    resume_id_ = info->public_id;
    if (info->model_fingerprint == fingerprint) return;
    ui::TextWriter note(err_);
    note.raw("ember: note: conversation ")
        .text(info->public_id)
        .raw(" was recorded with ")
        .text(info->model);
    if (remote) {
        note.raw("; it goes on with ").text(model).raw(" on the server\n");
    } else {
        note.raw(
            "; its saved state does not apply to this model, so its prompt is "
            "recomputed\n");
    }
}

std::unique_ptr<sessions::StateStore> ChatSessions::make_state_store(const Model& model) {
    // On a GPU the tier's rows are page-locked: restoring them is then a fast copy.
    if (tier_) tier_->pin_rows(model.device() != nullptr);
    sessions::StateStoreOptions state_options;
    state_options.cap_bytes = cap_;
    // The free space state leaves for messages (StateStoreOptions::min_free_bytes); the
    // variable exists for the tests that fill a small file system, where 0 shows what the
    // store did before it kept any.
    if (const char* env = std::getenv("EMBER_STATE_MIN_FREE"); env != nullptr && *env != '\0') {
        state_options.min_free_bytes = std::string(env) == "0" ? 0 : parse_byte_size(env);
    }
    // One database failure is one message: once recording has failed (its caller said so), the
    // store's failures on the same database (a full disk fails every write) would only repeat
    // it, and a warning the store gives again turn after turn is said once.
    state_options.on_warning = [this](const std::string& message) {
        if (sqlite_backend_ && sqlite_backend_->write_failed()) return;
        if (message == last_state_warning_) return;
        last_state_warning_ = message;
        ui::TextWriter(err_).raw("ember: warning: ").text(message).raw("\n");
    };
    // Keys cover the model's full content hash, computed (or found cached) on first use: two
    // models never share a row.
    return std::make_unique<sessions::StateStore>(*db_, model, options_.kv_type, state_options);
}

SessionDefaults ChatSessions::defaults_for(const Model& model,
                                           const Conversation& conversation) const {
    SessionDefaults defaults;
    defaults.model = fs::path(model.path()).filename().string();
    std::error_code ec;
    const fs::path absolute = fs::absolute(model.path(), ec);
    defaults.model_path = ec ? model.path() : absolute.lexically_normal().string();
    defaults.model_fingerprint = model.fingerprint();
    defaults.sampling_json = chat_settings_json(options_.sampling, conversation.options(),
                                                options_.max_tokens, options_.speculation);
    defaults.vocab_size = std::min<int64_t>(model.config().n_vocab,
                                            static_cast<int64_t>(model.tokenizer().vocab_size()));
    return defaults;
}

ChatSessions::ChatSessions(const ChatSessionOptions& o, const Model& model,
                           Conversation& conversation, std::FILE* err)
    : options_(o), err_(err) {
    if (!open_database(o)) return;
    attach_state_store(model, conversation);
    set_up_backend(o, defaults_for(model, conversation), false);
}

void ChatSessions::use_model(const Model& model, Conversation& conversation,
                             Conversation& previous) {
    if (!db_) return;  // nothing recorded, no state stored
    // The record first: if it cannot be written, the old model goes on untouched.
    sqlite_backend_->set_model(defaults_for(model, conversation));
    // What the old model evaluated last goes into its own rows before its store goes.
    previous.set_prefix_store(nullptr);
    attach_state_store(model, conversation);
}

void ChatSessions::attach_state_store(const Model& model, Conversation& conversation) {
    tiered_.reset();  // before the store it stands on
    state_ = make_state_store(model);
    // One tier for every model of the run: each model's blocks have their own keys.
    if (tier_) tiered_ = std::make_unique<sessions::TieredStateStore>(*state_, *tier_);
    conversation.set_prefix_store(tiered_ ? static_cast<PrefixStore*>(tiered_.get())
                                          : static_cast<PrefixStore*>(state_.get()));
}

ChatSessions::ChatSessions(const ChatSessionOptions& o, SessionDefaults defaults, std::FILE* err)
    : options_(o), err_(err) {
    if (!open_database(o)) return;
    set_up_backend(o, std::move(defaults), true);
}

ChatSessions::~ChatSessions() = default;

ui::SessionBackend& ChatSessions::backend() {
    if (sqlite_backend_) return *sqlite_backend_;
    return null_backend_;
}

int64_t ChatSessions::load_into(ui::ChatEngine& conversation) {
    if (resume_id_.empty() || !sqlite_backend_) return 0;
    std::optional<ui::LoadedSession> loaded = sqlite_backend_->load(resume_id_);
    if (!loaded) throw std::runtime_error("saved conversation '" + resume_id_ + "' vanished");
    conversation.clear();
    if (!loaded->system_prompt.empty()) conversation.set_system(loaded->system_prompt);
    for (auto& m : loaded->messages) conversation.add_message(std::move(m));
    resumed_settings_ = loaded->settings;
    return loaded->message_ids.empty() ? 0 : loaded->message_ids.back();
}

}  // namespace ember::app
