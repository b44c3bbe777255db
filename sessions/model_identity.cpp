#include "sessions/model_identity.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cstdio>
#include <ctime>

#include "engine/model/model.h"
#include "engine/util/utc_time.h"

namespace ember::sessions {

namespace {

std::optional<std::string> cached_hash(Database& db, const FileIdentity& id) {
    Statement s = db.prepare(
        "SELECT content_hash FROM model_file_hashes WHERE device = ? AND inode = ? AND size = ? "
        "AND mtime_ns = ?");
    s.bind(1, static_cast<int64_t>(id.device)).bind(2, static_cast<int64_t>(id.inode));
    s.bind(3, static_cast<int64_t>(id.size)).bind(4, id.mtime_ns);
    if (!s.step()) return std::nullopt;
    return s.column_text(0);
}

void cache_hash(Database& db, const FileIdentity& id, const std::string& hash) {
    // Inside a caller's transaction the row joins it; otherwise it gets its own.
    std::optional<Transaction> tx;
    if (!db.in_transaction()) tx.emplace(db);
    Statement s = db.prepare(
        "INSERT OR REPLACE INTO model_file_hashes(device, inode, size, mtime_ns, content_hash, "
        "hashed_at) VALUES (?,?,?,?,?,?)");
    s.bind(1, static_cast<int64_t>(id.device)).bind(2, static_cast<int64_t>(id.inode));
    s.bind(3, static_cast<int64_t>(id.size)).bind(4, id.mtime_ns);
    s.bind(5, hash).bind(6, utc_now(UtcFormat::Iso8601Seconds)).run();
    if (tx) tx->commit();
}

}  // namespace

std::optional<FileIdentity> file_identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    FileIdentity id;
    id.device = static_cast<uint64_t>(st.st_dev);
    id.inode = static_cast<uint64_t>(st.st_ino);
    id.size = static_cast<uint64_t>(st.st_size);
    id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return id;
}

std::string content_hash(std::span<const uint8_t> bytes) {
    const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return buf;
}

std::string model_content_hash(Database& db, const Model& model) {
    const GgufFile& file = model.gguf();
    const std::optional<FileIdentity> before = file_identity(model.path());
    // The identity must describe the bytes that are mapped; a file replaced since loading
    // (another size) is hashed from the mapping but not cached under the new file's name.
    const bool describes_mapping = before && before->size == file.file_size();
    if (describes_mapping) {
        if (auto hit = cached_hash(db, *before)) return *hit;
    }
    const std::string hash = content_hash(std::span(file.file_data(), file.file_size()));
    const std::optional<FileIdentity> after = file_identity(model.path());
    if (describes_mapping && after == before) {
        try {
            cache_hash(db, *before, hash);
        } catch (const SqliteError&) {
            // Only the cache failed (a busy or read-only database): the hash is still right.
        }
    }
    return hash;
}

std::string model_state_identity(Database& db, const Model& model) {
    // Exact, 16-bit and 8-bit activations write different K/V rows for the same tokens: a state
    // made under one must not resume a model loaded with another (the 8-bit identity stays as it
    // was, so states stored before the other kinds existed still match).
    const std::string activations = model.activations() == Activations::Exact  ? "+exact"
                                    : model.activations() == Activations::Wide ? "+wide"
                                                                               : "";
    return model.fingerprint() + "+" + model_content_hash(db, model) + activations;
}

}  // namespace ember::sessions
