#include "sessions/schema.h"

#include <iterator>
#include <optional>
#include <string>

namespace ember::sessions {

namespace {

// Version 1: conversations and their messages as a tree.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    model_fingerprint TEXT NOT NULL DEFAULT '',
    system_prompt TEXT NOT NULL DEFAULT '',
    sampling TEXT NOT NULL DEFAULT '{}',
    current_leaf INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    -- Orders conversations by their last change; clock times can tie or go backwards.
    activity INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    thinking TEXT NOT NULL DEFAULT '',
    token_ids BLOB,
    created_at TEXT NOT NULL
);
CREATE INDEX messages_by_conversation ON messages(conversation_id);
CREATE INDEX messages_by_parent ON messages(parent_id);
CREATE INDEX conversations_by_activity ON conversations(activity);
)sql";

// Version 2: per-reply statistics and full-text search over messages.
constexpr const char* kVersion2 = R"sql(
CREATE TABLE reply_stats (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    prompt_tokens INTEGER NOT NULL,
    tokens_reused INTEGER NOT NULL,
    tokens_restored INTEGER NOT NULL,
    tokens_evaluated INTEGER NOT NULL,
    tokens_generated INTEGER NOT NULL,
    prefill_seconds REAL NOT NULL,
    decode_seconds REAL NOT NULL,
    ttft_seconds REAL NOT NULL,
    finish TEXT NOT NULL
);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
)sql";

// Version 3: evaluated-prefix state, one row per block of tokens, chained to its parent
// block; usage counters for `ember sessions stats`.
constexpr const char* kVersion3 = R"sql(
CREATE TABLE state_blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL UNIQUE,
    parent_id INTEGER REFERENCES state_blocks(id) ON DELETE CASCADE,
    seed BLOB NOT NULL,
    begin_pos INTEGER NOT NULL,
    n_tokens INTEGER NOT NULL,
    tokens BLOB NOT NULL,
    state BLOB NOT NULL,
    stored_bytes INTEGER NOT NULL,
    raw_bytes INTEGER NOT NULL,
    last_used INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX state_blocks_by_parent ON state_blocks(parent_id);
CREATE INDEX state_blocks_by_seed ON state_blocks(seed, begin_pos);
CREATE INDEX state_blocks_by_use ON state_blocks(last_used, begin_pos);
CREATE TABLE state_counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
)sql";

// Version 4:
// - State blobs move out of state_blocks into state_blobs. Inline, a block's multi-megabyte
//   blob sat in the same row as its LRU stamp, so stamping a restored chain rewrote every
//   blob and summing sizes walked every overflow page. State is a cache, so version 3's
//   blocks are dropped rather than copied.
// - The full hash of each model file's bytes, cached by file identity (device, inode, size,
//   modification time) so a file is read in full once, not at every start. No path: a copy
//   has another inode, is hashed once, and then matches the original.
// - Recurrent-state snapshots of hybrid models: one per block, taken at the block's end
//   (recurrent state cannot be cut to a prefix, so it is stored where turns ended).
constexpr const char* kVersion4 = R"sql(
DROP TABLE state_blocks;
CREATE TABLE state_blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL UNIQUE,
    parent_id INTEGER REFERENCES state_blocks(id) ON DELETE CASCADE,
    seed BLOB NOT NULL,
    begin_pos INTEGER NOT NULL,
    n_tokens INTEGER NOT NULL,
    tokens BLOB NOT NULL,
    stored_bytes INTEGER NOT NULL,
    raw_bytes INTEGER NOT NULL,
    last_used INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX state_blocks_by_parent ON state_blocks(parent_id);
CREATE INDEX state_blocks_by_seed ON state_blocks(seed, begin_pos);
CREATE INDEX state_blocks_by_use ON state_blocks(last_used, begin_pos);
CREATE TABLE state_blobs (
    block_id INTEGER PRIMARY KEY REFERENCES state_blocks(id) ON DELETE CASCADE,
    state BLOB NOT NULL
);
CREATE TABLE model_file_hashes (
    device INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    hashed_at TEXT NOT NULL,
    PRIMARY KEY (device, inode, size, mtime_ns)
);
CREATE TABLE state_snapshots (
    block_id INTEGER PRIMARY KEY REFERENCES state_blocks(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL,
    raw_bytes INTEGER NOT NULL,
    state BLOB NOT NULL
);
)sql";

// Version 5: where a conversation's model file was (its absolute path, beside the file name
// and fingerprint), so --continue, --resume and replay reopen it without -m; the seed each
// reply was sampled with, so replay samples it again; when a state block was last used
// (UTC, for `ember sessions prune --state --older-than`; NULL: not since it was written).
// Older rows keep '' and NULL.
constexpr const char* kVersion5 = R"sql(
ALTER TABLE conversations ADD COLUMN model_path TEXT NOT NULL DEFAULT '';
ALTER TABLE reply_stats ADD COLUMN seed INTEGER;
ALTER TABLE state_blocks ADD COLUMN used_at TEXT;
)sql";

// Version 6: tool calls (ember chat --tools). A reply may carry the calls the model made
// (tool_calls: a JSON array of {"id", "name", "arguments"}, NULL when none), and a message of
// role 'tool' carries one call's result (tool_call_id and tool_name name the call). SQLite
// cannot change a CHECK constraint in place, so the table is rebuilt the documented way
// (https://sqlite.org/lang_altertable.html#otheralter: new table, copy, drop, rename) with
// foreign keys off (migrate() below). Rows are copied as they are, so the rebuild adds no
// broken reference (one a damaged file already had stays, for `ember sessions check`). They
// keep their ids, so the full-text index (keyed by them) and reply_stats stay valid, and the
// id sequence carries over, so ids of deleted messages are never reused.
constexpr const char* kVersion6 = R"sql(
CREATE TABLE messages_v6 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content TEXT NOT NULL,
    thinking TEXT NOT NULL DEFAULT '',
    token_ids BLOB,
    created_at TEXT NOT NULL,
    tool_calls TEXT,
    tool_call_id TEXT NOT NULL DEFAULT '',
    tool_name TEXT NOT NULL DEFAULT ''
);
INSERT INTO messages_v6(id, conversation_id, parent_id, role, content, thinking, token_ids,
                        created_at)
    SELECT id, conversation_id, parent_id, role, content, thinking, token_ids, created_at
    FROM messages;
DELETE FROM sqlite_sequence WHERE name = 'messages_v6';
INSERT INTO sqlite_sequence(name, seq)
    SELECT 'messages_v6', MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0),
                              COALESCE((SELECT MAX(id) FROM messages_v6), 0));
DROP TABLE messages;
ALTER TABLE messages_v6 RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages(conversation_id);
CREATE INDEX messages_by_parent ON messages(parent_id);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
)sql";

// Version 7: where each message came from. A reply records the model that wrote it (its file
// name, absolute path and fingerprint: a conversation may change models with /model) and the
// settings it was generated with (JSON, as the conversation's sampling column; /set changes
// them mid-conversation), so the transcript, `sessions show`, exports and `replay
// --regenerate` can say and use each turn's own. A prompt records what was attached before
// the typed text (/file, /run: a JSON array of {"heading", "bytes", "length"}, where length
// is the bytes of the content the attachment takes), so it is shown collapsed and the
// conversation's title comes from what the user typed. Older rows keep '' and NULL: unknown.
constexpr const char* kVersion7 = R"sql(
ALTER TABLE messages ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN model_path TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN model_fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN settings TEXT;
ALTER TABLE messages ADD COLUMN attachments TEXT;
)sql";

struct Migration {
    const char* sql;
    // Drops and recreates a table other tables refer to: foreign keys must be off while it
    // runs, or dropping the old table would cascade into the rows that refer to it.
    bool rebuilds_tables = false;
};

constexpr Migration kMigrations[] = {{kVersion1}, {kVersion2},       {kVersion3}, {kVersion4},
                                     {kVersion5}, {kVersion6, true}, {kVersion7}};
static_assert(std::size(kMigrations) == kSchemaVersion);

// Foreign keys off for one migration (the pragma is a no-op inside a transaction, so it is
// set around it) and back on after, also when the migration fails.
class ForeignKeysOff {
public:
    explicit ForeignKeysOff(Database& db) : db_(db) { db_.exec("PRAGMA foreign_keys=OFF"); }
    ~ForeignKeysOff() {
        try {
            db_.exec("PRAGMA foreign_keys=ON");
        } catch (...) {
            // Nothing better to do in a destructor; the next open turns them on again.
        }
    }
    ForeignKeysOff(const ForeignKeysOff&) = delete;
    ForeignKeysOff& operator=(const ForeignKeysOff&) = delete;

private:
    Database& db_;
};

}  // namespace

void migrate(Database& db, int target) {
    if (target < 0 || target > kSchemaVersion) {
        throw SqliteError("session database '" + db.path() + "': no schema version " +
                          std::to_string(target) + " (this ember knows 0 to " +
                          std::to_string(kSchemaVersion) + ")");
    }
    const int have = db.user_version();
    // Refused before any lookup: kMigrations holds versions 1 to kSchemaVersion only.
    if (have < 0) {
        throw SqliteError("session database '" + db.path() + "': schema version " +
                          std::to_string(have) +
                          " is negative (PRAGMA user_version was set by something other than "
                          "ember; this one knows 0 to " +
                          std::to_string(kSchemaVersion) + ")");
    }
    if (have > kSchemaVersion) {
        throw SqliteError("session database '" + db.path() + "': schema version " +
                          std::to_string(have) + " was written by a newer ember (this one knows " +
                          std::to_string(kSchemaVersion) + ")");
    }
    for (int version = have + 1; version <= target; ++version) {
        const Migration& migration = kMigrations[version - 1];
        std::optional<ForeignKeysOff> foreign_keys_off;
        if (migration.rebuilds_tables) foreign_keys_off.emplace(db);
        Transaction tx(db);
        // Another process may have applied this version while we waited for the write lock
        // (two embers opening a new database at once): read the version again under it.
        const int now = db.user_version();
        if (now < 0 || now > kSchemaVersion) {
            throw SqliteError("session database '" + db.path() + "': schema version " +
                              std::to_string(now) +
                              " changed under this ember to one it does "
                              "not know (0 to " +
                              std::to_string(kSchemaVersion) + ")");
        }
        if (now >= version) continue;
        db.exec(migration.sql);
        db.set_user_version(version);
        tx.commit();
    }
}

}  // namespace ember::sessions
