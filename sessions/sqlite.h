// A thin RAII layer over the SQLite C API: a connection, prepared statements and
// transactions. Every failure throws SqliteError naming the database file and what was being
// done, so a bad file or a full disk is a clear message, never a crash.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace ember::sessions {

class SqliteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Statement;

// How a Database is opened. read_only: SQLITE_OPEN_READONLY, nothing is created or changed
// (no WAL switch, no page size); for a WAL database whose -shm cannot be created (a read-only
// directory or file system) it falls back to `immutable=1`, but only while its -wal is absent
// or empty: an immutable reader ignores the log, so committed changes in it would be missed.
enum class OpenMode { read_write, read_only };

class Database {
public:
    // Opens (creating when missing) the database at `path`; ":memory:" for a private one.
    // Turns on WAL, foreign keys and a busy timeout, and checks that the file is a database.
    // OpenMode::read_only opens an existing file for reading only (see OpenMode).
    explicit Database(const std::string& path, OpenMode mode = OpenMode::read_write);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    const std::string& path() const { return path_; }
    void exec(std::string_view sql);
    // exec, retried for a few seconds while another connection holds the lock it needs.
    void exec_retrying_busy(std::string_view sql);
    Statement prepare(std::string_view sql);
    int64_t last_insert_id() const;
    int64_t changes() const;
    // Whether a transaction is open on this connection (statements then join it).
    bool in_transaction() const;
    // SQLite opened the file read-only (a read-only file, directory or file system): reads
    // work, the first write fails.
    bool read_only() const;
    // Opened read-only as `immutable=1` (a WAL database without a -wal, whose -shm could not
    // be created): SQLite takes no locks and assumes nobody writes the file meanwhile.
    bool immutable() const { return immutable_; }
    int user_version();
    void set_user_version(int version);
    // Asked every few thousand steps of a running statement (a long DELETE, VACUUM): false
    // interrupts it, which then throws SqliteError ("interrupted"; its transaction rolls
    // back). Empty: never asked. Runs on the thread running the statement.
    void set_progress_check(std::function<bool()> keep_going);
    // Throws a SqliteError for the last error of this connection, prefixed with `doing`.
    [[noreturn]] void fail(std::string_view doing) const;
    sqlite3* handle() const { return db_; }

private:
    void open_read_only();
    void open_uri(const std::string& query);

    std::string path_;
    sqlite3* db_ = nullptr;
    bool immutable_ = false;
    std::function<bool()> keep_going_;  // set_progress_check
};

class Statement {
public:
    Statement(Database& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
    ~Statement();
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&&) = delete;
    Statement(const Statement&) = delete;

    // Parameters are numbered from 1, as in SQL.
    Statement& bind(int index, int64_t value);
    Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
    Statement& bind(int index, double value);
    Statement& bind(int index, std::string_view text);
    Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
    Statement& bind(int index, const std::string& text) {
        return bind(index, std::string_view(text));
    }
    Statement& bind_blob(int index, std::span<const uint8_t> blob);
    Statement& bind_null(int index);

    // Runs to the next row: true when a row is ready, false when done.
    bool step();
    // Runs a statement that returns no rows.
    void run() {
        while (step()) {
        }
    }
    void reset();

    bool is_null(int column) const;
    int64_t column_int(int column) const;
    double column_double(int column) const;
    std::string column_text(int column) const;
    std::vector<uint8_t> column_blob(int column) const;

private:
    Database* db_;
    sqlite3_stmt* stmt_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted (an exception).
// Reads the whole BLOB in `column` of row `rowid` of `table` into `out` (resized, its capacity
// reused) through SQLite's incremental blob I/O: one copy from the database pages, where a
// column read allocates a buffer of the blob's size inside SQLite and another for the copy.
// State blobs run to megabytes, and fresh buffers of that size cost a page fault per 4 KiB.
// Returns false when there is no such row.
bool read_blob(Database& db, const char* table, const char* column, int64_t rowid,
               std::vector<uint8_t>& out);

class Transaction {
public:
    explicit Transaction(Database& db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

private:
    Database& db_;
    bool done_ = false;
};

// int32 token ids <-> little-endian bytes, for BLOB columns.
std::vector<uint8_t> tokens_to_blob(std::span<const int32_t> tokens);
std::vector<int32_t> blob_to_tokens(std::span<const uint8_t> blob);

}  // namespace ember::sessions
