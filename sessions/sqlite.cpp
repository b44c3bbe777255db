#include "sessions/sqlite.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

namespace ember::sessions {

namespace {

// "file:///..." for sqlite3_open_v2 with SQLITE_OPEN_URI: the absolute path with every byte
// outside [A-Za-z0-9/._~-] percent-encoded ('?', '#' and '%' included).
std::string file_uri(const std::string& path) {
    std::error_code ec;
    std::string abs = std::filesystem::absolute(path, ec).string();
    if (ec) abs = path;
    std::string uri = "file://";
    for (const char ch : abs) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c) != 0 || c == '/' || c == '.' || c == '_' || c == '~' || c == '-') {
            uri += ch;
        } else {
            static const char* const kHex = "0123456789ABCDEF";
            uri += '%';
            uri += kHex[c >> 4];
            uri += kHex[c & 15];
        }
    }
    return uri;
}

// Bytes in the file at `path`; 0 when it is missing (or unreadable).
int64_t size_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

Database::Database(const std::string& path, OpenMode mode) : path_(path) {
    if (mode == OpenMode::read_only) {
        open_read_only();
        return;
    }
    const int rc =
        sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    if (rc != SQLITE_OK) {
        const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError("session database '" + path + "': cannot open: " + why);
    }
    sqlite3_extended_result_codes(db_, 1);
    try {
        // Another ember process may hold the write lock for a moment (its reply commit).
        sqlite3_busy_timeout(db_, 5000);
        // The first statement reads the header: a file that is not a database fails here.
        // Large pages for a new database (ignored for an existing one): state blobs run to
        // megabytes, and each page of a blob is one read; 64 KiB pages make those 16 times
        // fewer than the default 4 KiB.
        exec("PRAGMA page_size=65536");
        // Switching a new file to WAL takes an exclusive lock that SQLite does not wait for
        // through the busy handler (it reports "database is locked" at once when another
        // connection is opening the same new file), so the switch is retried here.
        exec_retrying_busy("PRAGMA journal_mode=WAL");
        // Reads of the database file through a memory map rather than a read() per page.
        exec("PRAGMA mmap_size=1073741824");
        exec("PRAGMA foreign_keys=ON");
        // FULL: a committed message survives a power cut, not only a process crash.
        exec("PRAGMA synchronous=FULL");
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

void Database::open_uri(const std::string& query) {
    if (db_ != nullptr) sqlite3_close(db_);
    db_ = nullptr;
    const std::string uri = file_uri(path_) + "?" + query;
    const int rc =
        sqlite3_open_v2(uri.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
    if (rc != SQLITE_OK) {
        const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError("session database '" + path_ + "' (read-only): cannot open: " + why);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 5000);
}

void Database::open_read_only() {
    // The first read opens the WAL index: it fails when the database is in WAL mode and its
    // -shm can neither be opened nor created (SQLite then has no way to see the log).
    const char* const probe = "SELECT count(*) FROM sqlite_master";
    open_uri("mode=ro");
    int rc = sqlite3_exec(db_, probe, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_NOTADB && (rc & 0xff) != SQLITE_CORRUPT) {
        const std::string why = sqlite3_errmsg(db_);
        const std::string wal = path_ + "-wal";
        if (size_of(wal) > 0) {
            sqlite3_close(db_);
            db_ = nullptr;
            throw SqliteError(
                "session database '" + path_ + "' is read-only and its write-ahead log '" + wal +
                "' holds changes that SQLite cannot read without creating '" + path_ + "-shm' (" +
                why + "); open it once where its directory can be written");
        }
        // No log: the file alone is the whole database, so reading it as immutable (no
        // locks, no -shm) sees every committed change.
        open_uri("mode=ro&immutable=1");
        immutable_ = true;
        rc = sqlite3_exec(db_, probe, nullptr, nullptr, nullptr);
    }
    if (rc != SQLITE_OK) {
        const std::string why = sqlite3_errmsg(db_);
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError("session database '" + path_ + "' (read-only): " + why);
    }
    try {
        exec("PRAGMA mmap_size=1073741824");
        exec("PRAGMA foreign_keys=ON");
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

Database::~Database() {
    if (db_ != nullptr) sqlite3_close(db_);
}

void Database::set_progress_check(std::function<bool()> keep_going) {
    keep_going_ = std::move(keep_going);
    if (!keep_going_) {
        sqlite3_progress_handler(db_, 0, nullptr, nullptr);
        return;
    }
    // Some hundreds of virtual-machine steps: well under a millisecond apart for ordinary rows,
    // and a step that copies a megabyte of state blob (VACUUM, a prune) still comes back
    // within some tens of milliseconds (4,096 steps let a VACUUM run 1.5 s before asking).
    constexpr int kSteps = 256;
    sqlite3_progress_handler(
        db_, kSteps, [](void* self) { return static_cast<Database*>(self)->keep_going_() ? 0 : 1; },
        this);
}

void Database::fail(std::string_view doing) const {
    throw SqliteError("session database '" + path_ + "': " + std::string(doing) + ": " +
                      sqlite3_errmsg(db_));
}

void Database::exec_retrying_busy(std::string_view sql) {
    // As long as the busy timeout above: a writer holds the lock for a commit at most.
    constexpr auto kPatience = std::chrono::seconds(5);
    const auto give_up = std::chrono::steady_clock::now() + kPatience;
    const std::string text(sql);
    for (;;) {
        const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
        if (rc == SQLITE_OK) return;
        const int primary = rc & 0xff;
        const bool busy = primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
        if (!busy || std::chrono::steady_clock::now() >= give_up) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    exec(sql);  // one more try, which reports why it failed
}

void Database::exec(std::string_view sql) {
    const std::string text(sql);
    char* message = nullptr;
    if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
        std::string why = message != nullptr ? message : sqlite3_errmsg(db_);
        sqlite3_free(message);
        const size_t cut = text.find('\n');
        throw SqliteError("session database '" + path_ + "': " + why +
                          " (in: " + text.substr(0, std::min<size_t>(cut, 60)) + ")");
    }
}

Statement Database::prepare(std::string_view sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) !=
        SQLITE_OK) {
        fail("preparing '" + std::string(sql.substr(0, 60)) + "'");
    }
    return Statement(*this, stmt);
}

int64_t Database::last_insert_id() const {
    return sqlite3_last_insert_rowid(db_);
}

int64_t Database::changes() const {
    return sqlite3_changes64(db_);
}

bool Database::read_only() const {
    return sqlite3_db_readonly(db_, "main") == 1;
}

bool Database::in_transaction() const {
    return sqlite3_get_autocommit(db_) == 0;
}

int Database::user_version() {
    Statement s = prepare("PRAGMA user_version");
    s.step();
    return static_cast<int>(s.column_int(0));
}

void Database::set_user_version(int version) {
    exec("PRAGMA user_version=" + std::to_string(version));
}

Statement::~Statement() {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
}

Statement& Statement::bind(int index, int64_t value) {
    if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) db_->fail("binding an integer");
    return *this;
}

Statement& Statement::bind(int index, double value) {
    if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) db_->fail("binding a number");
    return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
    if (sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                            SQLITE_UTF8) != SQLITE_OK) {
        db_->fail("binding text");
    }
    return *this;
}

Statement& Statement::bind_blob(int index, std::span<const uint8_t> blob) {
    // A zero-length blob must still be a blob, not NULL: pass a valid pointer.
    static const uint8_t kEmpty = 0;
    const void* data = blob.empty() ? &kEmpty : blob.data();
    if (sqlite3_bind_blob64(stmt_, index, data, blob.size(), SQLITE_TRANSIENT) != SQLITE_OK) {
        db_->fail("binding a blob");
    }
    return *this;
}

Statement& Statement::bind_null(int index) {
    if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) db_->fail("binding null");
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    db_->fail(std::string("running '") + std::string(sqlite3_sql(stmt_)).substr(0, 60) + "'");
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int column) const {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::column_int(int column) const {
    return sqlite3_column_int64(stmt_, column);
}

double Statement::column_double(int column) const {
    return sqlite3_column_double(stmt_, column);
}

std::string Statement::column_text(int column) const {
    const auto* text = sqlite3_column_text(stmt_, column);
    if (text == nullptr) return {};
    return std::string(reinterpret_cast<const char*>(text),
                       static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::vector<uint8_t> Statement::column_blob(int column) const {
    const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, column));
    const auto size = static_cast<size_t>(sqlite3_column_bytes(stmt_, column));
    if (data == nullptr) return {};
    return std::vector<uint8_t>(data, data + size);
}

bool read_blob(Database& db, const char* table, const char* column, int64_t rowid,
               std::vector<uint8_t>& out) {
    sqlite3_blob* blob = nullptr;
    const int rc = sqlite3_blob_open(db.handle(), "main", table, column, rowid, 0, &blob);
    if (rc != SQLITE_OK) {
        sqlite3_blob_close(blob);  // null-safe; a handle may be returned on failure
        // No such row (evicted meanwhile by another process): SQLITE_ERROR with this message.
        if (rc == SQLITE_ERROR && std::strstr(sqlite3_errmsg(db.handle()), "no such rowid")) {
            return false;
        }
        db.fail(std::string("reading ") + table + "." + column);
    }
    const int size = sqlite3_blob_bytes(blob);
    out.resize(static_cast<size_t>(size));
    const int read = size > 0 ? sqlite3_blob_read(blob, out.data(), size, 0) : SQLITE_OK;
    sqlite3_blob_close(blob);
    if (read != SQLITE_OK) db.fail(std::string("reading ") + table + "." + column);
    return true;
}

Transaction::Transaction(Database& db) : db_(db) {
    db_.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
    if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

std::vector<uint8_t> tokens_to_blob(std::span<const int32_t> tokens) {
    std::vector<uint8_t> out(tokens.size() * 4);
    if (!tokens.empty()) std::memcpy(out.data(), tokens.data(), out.size());
    return out;
}

std::vector<int32_t> blob_to_tokens(std::span<const uint8_t> blob) {
    std::vector<int32_t> out(blob.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), blob.data(), out.size() * 4);
    return out;
}

}  // namespace ember::sessions
