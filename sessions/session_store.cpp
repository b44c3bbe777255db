#include "sessions/session_store.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_set>

#include "engine/util/bounded_json.h"
#include "engine/util/utc_time.h"
#include "engine/util/utf8.h"

namespace ember::sessions {

namespace {

constexpr const char* kInfoColumns =
    "SELECT c.id, c.public_id, c.title, c.model, c.model_fingerprint, c.system_prompt, "
    "c.sampling, COALESCE(c.current_leaf, 0), c.created_at, c.updated_at, "
    "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id), c.model_path "
    "FROM conversations c ";

// Eight hex digits: short enough to type, and unique prefixes are accepted.
std::string random_public_id() {
    std::random_device rd;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    return buf;
}

// The first line of the first user message, shortened: a title nobody had to type.
std::string title_from(const std::string& content) {
    std::string line = content.substr(0, content.find('\n'));
    const size_t start = line.find_first_not_of(" \t");
    line = start == std::string::npos ? std::string() : line.substr(start);
    constexpr size_t kMax = 60;
    if (line.size() > kMax) {
        line = line.substr(0, utf8_cut(line, kMax)) + "...";
    }
    return line;
}

// Words of `text` as an FTS5 query in which every word must occur; quoting each word keeps
// FTS5 operators and punctuation in user input from being parsed as query syntax.
std::string fts_query(const std::string& text) {
    std::string query;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        size_t j = i;
        while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
        if (j > i) {
            std::string word = "\"";
            for (size_t k = i; k < j; ++k) {
                if (text[k] == '"') word += '"';
                word += text[k];
            }
            word += '"';
            if (!query.empty()) query += ' ';
            query += word;
        }
        i = j;
    }
    return query;
}

std::optional<ReplyStats> read_stats(Database& db, int64_t message_id) {
    Statement s = db.prepare(
        "SELECT prompt_tokens, tokens_reused, tokens_restored, tokens_evaluated, "
        "tokens_generated, prefill_seconds, decode_seconds, ttft_seconds, finish, seed "
        "FROM reply_stats WHERE message_id = ?");
    s.bind(1, message_id);
    if (!s.step()) return std::nullopt;
    ReplyStats r;
    r.prompt_tokens = s.column_int(0);
    r.tokens_reused = s.column_int(1);
    r.tokens_restored = s.column_int(2);
    r.tokens_evaluated = s.column_int(3);
    r.tokens_generated = s.column_int(4);
    r.prefill_seconds = s.column_double(5);
    r.decode_seconds = s.column_double(6);
    r.ttft_seconds = s.column_double(7);
    r.finish = s.column_text(8);
    // Stored as SQLite's signed 64 bits; the seed is the same bits unsigned.
    if (!s.is_null(9)) r.seed = static_cast<uint64_t>(s.column_int(9));
    return r;
}

StoredMessage read_message(Database& db, Statement& s) {
    StoredMessage m;
    m.id = s.column_int(0);
    m.parent_id = s.column_int(1);
    m.role = s.column_text(2);
    m.content = s.column_text(3);
    m.thinking = s.column_text(4);
    const std::vector<uint8_t> blob = s.column_blob(5);
    m.token_ids = blob_to_tokens(blob);
    // A length that is not a whole number of ids cannot be a list the chat wrote; the range
    // of the ids is only known with the model (token_ids_fit).
    m.token_ids_damaged = blob.size() % 4 != 0;
    if (m.token_ids_damaged) m.token_ids.clear();
    m.created_at = s.column_text(6);
    if (!s.is_null(7)) m.tool_calls = s.column_text(7);
    m.tool_call_id = s.column_text(8);
    m.tool_name = s.column_text(9);
    m.origin.model = s.column_text(10);
    m.origin.model_path = s.column_text(11);
    m.origin.model_fingerprint = s.column_text(12);
    if (!s.is_null(13)) m.origin.settings = s.column_text(13);
    if (!s.is_null(14)) m.attachments = s.column_text(14);
    if (m.role == "assistant") m.stats = read_stats(db, m.id);
    return m;
}

// A reply's tool calls (the stored JSON array) as Markdown: each call's name and arguments.
std::string tool_calls_markdown(const std::string& stored) {
    if (stored.empty()) return {};
    // The column is text anyone with the file can edit: parsed with a depth bound.
    const auto calls = try_parse_json_bounded<nlohmann::json>(stored);
    if (!calls.is_array()) return "\nTool calls: `" + stored + "`\n";
    std::string md;
    for (const auto& call : calls) {
        const std::string name = call.is_object() ? call.value("name", "") : "";
        const std::string arguments =
            call.is_object() && call.contains("arguments") && call["arguments"].is_string()
                ? call["arguments"].get<std::string>()
                : "";
        md += "\nTool call: `" + name + "` " + arguments + "\n";
    }
    return md;
}

nlohmann::ordered_json stats_json(const ReplyStats& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"tokens_reused", r.tokens_reused},
            {"tokens_restored", r.tokens_restored},
            {"tokens_evaluated", r.tokens_evaluated},
            {"tokens_generated", r.tokens_generated},
            {"prefill_seconds", r.prefill_seconds},
            {"decode_seconds", r.decode_seconds},
            {"ttft_seconds", r.ttft_seconds},
            {"finish", r.finish}};
}

// Settings are floats written out as doubles (0.8f is stored as 0.800000011920929): a value a
// float holds exactly is shown as the shortest decimal that reads back as that float (0.8).
void shortest_float_decimals(nlohmann::ordered_json& value) {
    if (value.is_structured()) {
        for (auto& item : value) shortest_float_decimals(item);
        return;
    }
    if (!value.is_number_float()) return;
    const double d = value.get<double>();
    const float f = static_cast<float>(d);
    if (!std::isfinite(d) || static_cast<double>(f) != d) return;
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, f).ptr;
    value = std::strtod(std::string(text, end).c_str(), nullptr);
}

}  // namespace

bool token_ids_fit(const StoredMessage& m, int64_t vocab_size) {
    if (m.token_ids_damaged) return false;
    if (vocab_size <= 0) return true;
    return std::all_of(m.token_ids.begin(), m.token_ids.end(),
                       [&](int32_t id) { return id >= 0 && id < vocab_size; });
}

std::string local_time(const std::string& utc) {
    std::tm tm{};
    if (strptime(utc.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return utc;
    const std::time_t t = timegm(&tm);
    std::tm local{};
    localtime_r(&t, &local);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &local);
    return buf;
}

ConversationInfo SessionStore::read_info(Statement& s) {
    ConversationInfo c;
    c.id = s.column_int(0);
    c.public_id = s.column_text(1);
    c.title = s.column_text(2);
    c.model = s.column_text(3);
    c.model_fingerprint = s.column_text(4);
    c.system_prompt = s.column_text(5);
    c.sampling_json = s.column_text(6);
    c.current_leaf = s.column_int(7);
    c.created_at = s.column_text(8);
    c.updated_at = s.column_text(9);
    c.message_count = s.column_int(10);
    c.model_path = s.column_text(11);
    c.turns = count_turns(c.current_leaf);
    return c;
}

int64_t SessionStore::count_turns(int64_t leaf) {
    if (leaf == 0) return 0;
    // UNION, not UNION ALL: a row already on the path is not added again, so a parent chain
    // that loops (a damaged file) ends after each message once instead of running forever.
    Statement s = db_.prepare(
        "WITH RECURSIVE path(id, parent_id, role) AS ("
        " SELECT id, parent_id, role FROM messages WHERE id = ?"
        " UNION SELECT m.id, m.parent_id, m.role FROM messages m"
        " JOIN path p ON m.id = p.parent_id)"
        " SELECT COUNT(*) FROM path WHERE role = 'user'");
    s.bind(1, leaf);
    s.step();
    return s.column_int(0);
}

void SessionStore::touch(int64_t conversation_id) {
    Statement s = db_.prepare(
        "UPDATE conversations SET updated_at = ?, "
        "activity = (SELECT COALESCE(MAX(activity), 0) + 1 FROM conversations) WHERE id = ?");
    s.bind(1, utc_now(UtcFormat::Iso8601Milliseconds)).bind(2, conversation_id).run();
}

ConversationInfo SessionStore::create(const NewConversation& n) {
    Transaction tx(db_);
    std::string public_id;
    for (int attempt = 0;; ++attempt) {
        public_id = random_public_id();
        Statement s = db_.prepare("SELECT 1 FROM conversations WHERE public_id = ?");
        s.bind(1, public_id);
        if (!s.step()) break;
        if (attempt > 100) db_.fail("cannot find a free conversation id");
    }
    const std::string now = utc_now(UtcFormat::Iso8601Milliseconds);
    Statement s = db_.prepare(
        "INSERT INTO conversations(public_id, title, model, model_fingerprint, system_prompt, "
        "sampling, created_at, updated_at, activity, model_path) VALUES (?,?,?,?,?,?,?,?, "
        "(SELECT COALESCE(MAX(activity), 0) + 1 FROM conversations), ?)");
    s.bind(1, public_id).bind(2, n.title).bind(3, n.model).bind(4, n.model_fingerprint);
    s.bind(5, n.system_prompt).bind(6, n.sampling_json).bind(7, now).bind(8, now);
    s.bind(9, n.model_path).run();
    const int64_t id = db_.last_insert_id();
    tx.commit();
    ConversationInfo c;
    c.id = id;
    c.public_id = public_id;
    c.title = n.title;
    c.model = n.model;
    c.model_fingerprint = n.model_fingerprint;
    c.model_path = n.model_path;
    c.system_prompt = n.system_prompt;
    c.sampling_json = n.sampling_json;
    c.created_at = c.updated_at = now;
    return c;
}

int64_t SessionStore::add_message(int64_t conversation_id, int64_t parent_id, const NewMessage& m) {
    Transaction tx(db_);
    if (parent_id != 0) {
        Statement p = db_.prepare("SELECT conversation_id FROM messages WHERE id = ?");
        p.bind(1, parent_id);
        if (!p.step() || p.column_int(0) != conversation_id) {
            throw SqliteError("session database '" + db_.path() + "': parent message " +
                              std::to_string(parent_id) + " is not in conversation " +
                              std::to_string(conversation_id));
        }
    }
    Statement s = db_.prepare(
        "INSERT INTO messages(conversation_id, parent_id, role, content, thinking, token_ids, "
        "created_at, tool_calls, tool_call_id, tool_name, model, model_path, model_fingerprint, "
        "settings, attachments) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    s.bind(1, conversation_id);
    if (parent_id == 0) {
        s.bind_null(2);
    } else {
        s.bind(2, parent_id);
    }
    s.bind(3, m.role).bind(4, m.content).bind(5, m.thinking);
    if (m.token_ids.empty()) {
        s.bind_null(6);
    } else {
        s.bind_blob(6, tokens_to_blob(m.token_ids));
    }
    s.bind(7, utc_now(UtcFormat::Iso8601Milliseconds));
    if (m.tool_calls.empty()) {
        s.bind_null(8);
    } else {
        s.bind(8, m.tool_calls);
    }
    s.bind(9, m.tool_call_id).bind(10, m.tool_name);
    s.bind(11, m.origin.model).bind(12, m.origin.model_path).bind(13, m.origin.model_fingerprint);
    if (m.origin.settings.empty()) {
        s.bind_null(14);
    } else {
        s.bind(14, m.origin.settings);
    }
    if (m.attachments.empty()) {
        s.bind_null(15);
    } else {
        s.bind(15, m.attachments);
    }
    s.run();
    const int64_t id = db_.last_insert_id();
    if (m.stats != nullptr) {
        const ReplyStats& r = *m.stats;
        Statement st = db_.prepare(
            "INSERT INTO reply_stats(message_id, prompt_tokens, tokens_reused, tokens_restored, "
            "tokens_evaluated, tokens_generated, prefill_seconds, decode_seconds, ttft_seconds, "
            "finish, seed) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
        st.bind(1, id).bind(2, r.prompt_tokens).bind(3, r.tokens_reused);
        st.bind(4, r.tokens_restored).bind(5, r.tokens_evaluated).bind(6, r.tokens_generated);
        st.bind(7, r.prefill_seconds).bind(8, r.decode_seconds).bind(9, r.ttft_seconds);
        st.bind(10, r.finish);
        if (r.seed) {
            st.bind(11, static_cast<int64_t>(*r.seed));
        } else {
            st.bind_null(11);
        }
        st.run();
    }
    Statement c = db_.prepare(
        "UPDATE conversations SET current_leaf = ?, "
        "title = CASE WHEN title = '' AND ? = 'user' THEN ? ELSE title END WHERE id = ?");
    // Titled by what the user typed, not by what was attached before it ("Output of: ls").
    const size_t typed = std::min(m.attached_bytes, m.content.size());
    const std::string title = title_from(m.content.substr(typed));
    c.bind(1, id).bind(2, m.role).bind(3, title.empty() ? title_from(m.content) : title);
    c.bind(4, conversation_id).run();
    touch(conversation_id);
    tx.commit();
    return id;
}

void SessionStore::set_current_leaf(int64_t conversation_id, int64_t message_id) {
    Transaction tx(db_);
    Statement s = db_.prepare(
        "UPDATE conversations SET current_leaf = ? WHERE id = ? AND EXISTS "
        "(SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?)");
    s.bind(1, message_id).bind(2, conversation_id).bind(3, message_id).bind(4, conversation_id);
    s.run();
    if (db_.changes() == 0) {
        throw SqliteError("session database '" + db_.path() + "': message " +
                          std::to_string(message_id) + " is not in conversation " +
                          std::to_string(conversation_id));
    }
    touch(conversation_id);
    tx.commit();
}

void SessionStore::set_system_prompt(int64_t conversation_id, const std::string& text) {
    Transaction tx(db_);
    Statement s = db_.prepare("UPDATE conversations SET system_prompt = ? WHERE id = ?");
    s.bind(1, text).bind(2, conversation_id).run();
    touch(conversation_id);
    tx.commit();
}

void SessionStore::rename(int64_t conversation_id, const std::string& title) {
    Transaction tx(db_);
    Statement s = db_.prepare("UPDATE conversations SET title = ? WHERE id = ?");
    s.bind(1, title).bind(2, conversation_id).run();
    touch(conversation_id);
    tx.commit();
}

void SessionStore::set_model(int64_t conversation_id, const std::string& model,
                             const std::string& model_fingerprint, const std::string& model_path) {
    Transaction tx(db_);
    Statement s = db_.prepare(
        "UPDATE conversations SET model = ?, model_fingerprint = ?, model_path = ? WHERE id = ?");
    s.bind(1, model).bind(2, model_fingerprint).bind(3, model_path).bind(4, conversation_id).run();
    touch(conversation_id);
    tx.commit();
}

void SessionStore::set_settings(int64_t conversation_id, const std::string& settings_json) {
    Transaction tx(db_);
    Statement s = db_.prepare("UPDATE conversations SET sampling = ? WHERE id = ?");
    s.bind(1, settings_json).bind(2, conversation_id).run();
    touch(conversation_id);
    tx.commit();
}

void SessionStore::remove(int64_t conversation_id) {
    Transaction tx(db_);
    // A damaged file can give a message of another conversation a parent in this one; the
    // cascade below would delete it with its parent, so it is made a root first.
    Statement detach = db_.prepare(
        "UPDATE messages SET parent_id = NULL WHERE conversation_id != ?1 AND parent_id IN "
        "(SELECT id FROM messages WHERE conversation_id = ?1)");
    detach.bind(1, conversation_id).run();
    // Messages, their stats and search entries go with it (ON DELETE CASCADE, triggers).
    Statement s = db_.prepare("DELETE FROM conversations WHERE id = ?");
    s.bind(1, conversation_id).run();
    tx.commit();
}

std::vector<ConversationInfo> SessionStore::list(int64_t limit) {
    Statement s =
        db_.prepare(std::string(kInfoColumns) + "ORDER BY c.activity DESC, c.id DESC LIMIT ?");
    s.bind(1, limit < 0 ? INT64_MAX : limit);
    std::vector<ConversationInfo> out;
    while (s.step()) out.push_back(read_info(s));
    return out;
}

std::optional<ConversationInfo> SessionStore::find(const std::string& id) {
    if (id.empty()) return std::nullopt;
    Statement s = db_.prepare(std::string(kInfoColumns) +
                              "WHERE c.public_id = ?1 OR substr(c.public_id, 1, length(?1)) = ?1 "
                              "ORDER BY c.public_id = ?1 DESC LIMIT 2");
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    ConversationInfo first = read_info(s);
    if (first.public_id != id && s.step()) {
        throw SqliteError("conversation id '" + id + "' is ambiguous (" + first.public_id + ", " +
                          s.column_text(1) + ", ...): type more of it");
    }
    return first;
}

std::optional<ConversationInfo> SessionStore::most_recent() {
    auto all = list(1);
    if (all.empty()) return std::nullopt;
    return all.front();
}

std::vector<StoredMessage> SessionStore::branch(const ConversationInfo& c, int64_t leaf) {
    if (leaf < 0) leaf = c.current_leaf;
    std::vector<StoredMessage> path;
    Statement s = db_.prepare(
        "SELECT id, COALESCE(parent_id, 0), role, content, thinking, token_ids, created_at, "
        "tool_calls, tool_call_id, tool_name, model, model_path, model_fingerprint, settings, "
        "attachments "
        "FROM messages "
        "WHERE id = ? AND conversation_id = ?");
    // Every message is visited at most once: a parent chain that comes back to a message
    // already on the path is a cycle (a damaged file), reported instead of followed forever.
    std::unordered_set<int64_t> seen;
    for (int64_t id = leaf; id != 0;) {
        if (!seen.insert(id).second) {
            const std::string at = std::to_string(path.back().id);
            throw DamagedConversation(c.public_id, path.back().id == id
                                                       ? "message " + at + " is its own parent"
                                                       : "the parents of message " + at +
                                                             " loop back to message " +
                                                             std::to_string(id));
        }
        s.bind(1, id).bind(2, c.id);
        if (!s.step()) {
            // The leaf itself missing (current_leaf naming no message of the conversation):
            // reported, never read as an empty branch (a resumed chat would start a new root
            // without its history, silently). A missing parent means the root and
            // everything above it are lost.
            if (path.empty()) {
                throw DamagedConversation(
                    c.public_id,
                    "its current message (" + std::to_string(id) + ") is not in the conversation");
            }
            throw DamagedConversation(c.public_id, "message " + std::to_string(path.back().id) +
                                                       " has a parent (" + std::to_string(id) +
                                                       ") that is not in the conversation");
        }
        path.push_back(read_message(db_, s));
        id = path.back().parent_id;
        s.reset();
    }
    std::reverse(path.begin(), path.end());
    return path;
}

std::vector<StoredMessage> SessionStore::all_messages(int64_t conversation_id) {
    Statement s = db_.prepare(
        "SELECT id, COALESCE(parent_id, 0), role, content, thinking, token_ids, created_at, "
        "tool_calls, tool_call_id, tool_name, model, model_path, model_fingerprint, settings, "
        "attachments "
        "FROM messages "
        "WHERE conversation_id = ? ORDER BY id");
    s.bind(1, conversation_id);
    std::vector<StoredMessage> out;
    while (s.step()) out.push_back(read_message(db_, s));
    return out;
}

std::vector<SearchHit> SessionStore::search(const std::string& text, int64_t limit) {
    const std::string query = fts_query(text);
    if (query.empty()) return {};
    Statement s = db_.prepare(
        "SELECT c.public_id, c.title, m.id, m.role, "
        "snippet(messages_fts, 0, '[', ']', '...', 12) "
        "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        "JOIN conversations c ON c.id = m.conversation_id "
        "WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?");
    s.bind(1, query).bind(2, limit < 0 ? INT64_MAX : limit);
    std::vector<SearchHit> out;
    while (s.step()) {
        out.push_back({s.column_text(0), s.column_text(1), s.column_int(2), s.column_text(3),
                       s.column_text(4)});
    }
    return out;
}

std::string SessionStore::export_markdown(const ConversationInfo& c) {
    std::string md = "# " + (c.title.empty() ? std::string("(untitled)") : c.title) + "\n\n";
    md += "- id: " + c.public_id + "\n- model: " + c.model +
          "\n- created: " + local_time(c.created_at) + "\n- updated: " + local_time(c.updated_at) +
          "\n";
    if (!c.system_prompt.empty()) md += "\n## System\n\n" + c.system_prompt + "\n";
    // A reply's model is named where it changes (a conversation that went on with /model):
    // from the first reply on when another model than the one named above wrote it.
    std::string previous_model = c.model;
    for (const StoredMessage& m : branch(c)) {
        const bool model_changes =
            m.role == "assistant" && !m.origin.model.empty() && m.origin.model != previous_model;
        if (m.role == "assistant" && !m.origin.model.empty()) previous_model = m.origin.model;
        const std::string heading =
            m.role == "user" ? "User"
            : m.role == "assistant"
                ? (model_changes ? "Assistant (" + m.origin.model + ")" : "Assistant")
            : m.role == "tool" ? "Tool result (" + m.tool_name + ")"
                               : "System";
        md += "\n## " + heading + "\n\n";
        if (!m.thinking.empty()) {
            md += "<details><summary>Thinking</summary>\n\n" + m.thinking + "\n\n</details>\n\n";
        }
        if (m.role == "tool") {
            md += "```\n" + m.content + (m.content.ends_with('\n') ? "" : "\n") + "```\n";
            continue;
        }
        if (!m.content.empty()) md += m.content + "\n";
        md += tool_calls_markdown(m.tool_calls);
    }
    return md;
}

std::string SessionStore::export_json(const ConversationInfo& c, bool ascii_only) {
    using json = nlohmann::ordered_json;
    // The column is text anyone with the file can edit: a document nested deeper than the
    // limit is refused before it is built (dumping it would recurse once per level).
    json sampling = parse_json_bounded(
        c.sampling_json, {},
        "conversation " + c.public_id + ": its stored settings (the sampling column)");
    if (sampling.is_discarded()) sampling = c.sampling_json;
    shortest_float_decimals(sampling);
    json out = {{"id", c.public_id},          {"title", c.title},
                {"model", c.model},           {"model_fingerprint", c.model_fingerprint},
                {"model_path", c.model_path}, {"system_prompt", c.system_prompt},
                {"sampling", sampling},       {"created_at", c.created_at},
                {"updated_at", c.updated_at}, {"current_leaf", c.current_leaf}};
    json branch_ids = json::array();
    for (const StoredMessage& m : branch(c)) branch_ids.push_back(m.id);
    out["branch"] = branch_ids;
    json messages = json::array();
    for (const StoredMessage& m : all_messages(c.id)) {
        json j = {{"id", m.id},
                  {"parent_id", m.parent_id == 0 ? json(nullptr) : json(m.parent_id)},
                  {"role", m.role},
                  {"content", m.content},
                  {"created_at", m.created_at}};
        if (!m.thinking.empty()) j["thinking"] = m.thinking;
        if (!m.token_ids.empty()) j["token_ids"] = m.token_ids;
        if (m.stats) j["stats"] = stats_json(*m.stats);
        if (!m.tool_calls.empty()) {
            const json calls = try_parse_json_bounded<json>(m.tool_calls);
            j["tool_calls"] = calls.is_discarded() ? json(m.tool_calls) : calls;
        }
        if (m.role == "tool") {
            j["tool_call_id"] = m.tool_call_id;
            j["tool_name"] = m.tool_name;
        }
        if (!m.origin.model.empty()) {
            j["model"] = m.origin.model;
            j["model_path"] = m.origin.model_path;
            j["model_fingerprint"] = m.origin.model_fingerprint;
        }
        // Stored JSON (schema 7) is text anyone with the file can edit: parsed with a depth
        // bound, and kept as a string when it does not parse.
        const auto stored_json = [](const std::string& text) {
            const json value = try_parse_json_bounded<json>(text);
            return value.is_discarded() ? json(text) : value;
        };
        if (!m.origin.settings.empty()) j["settings"] = stored_json(m.origin.settings);
        if (!m.attachments.empty()) j["attachments"] = stored_json(m.attachments);
        messages.push_back(j);
    }
    out["messages"] = messages;
    // JSON strings cannot carry bytes that are not UTF-8 (a plain-text prompt may hold any):
    // those show as U+FFFD here; the Markdown export keeps them exactly.
    return out.dump(2, ' ', ascii_only, json::error_handler_t::replace) + "\n";
}

}  // namespace ember::sessions
