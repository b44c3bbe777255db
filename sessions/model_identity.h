// Which model a stored state belongs to. Model::fingerprint() covers the architecture,
// hyper-parameters, tensor table, tokenizer and template, but samples the tensor bytes, so
// it misses a single changed weight. State keys are therefore also seeded with a full
// XXH3-128 of the model file's bytes (tensors and metadata alike). Hashing a multi-GB file
// costs one read of it, so the hash is cached in the session database by file identity
// (device, inode, size, modification time): the same file is hashed once, and a copy
// elsewhere (another inode) is hashed once more and then matches the original. The path is
// not part of the identity, so moving or copying a model keeps its stored state usable.
//
// Changing bytes in place while keeping size and mtime would go unnoticed: that takes
// deliberate effort (touch -d) and is not defended against; an ordinary write moves mtime.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "sessions/sqlite.h"

namespace ember {
class Model;
}

namespace ember::sessions {

// What identifies a file's contents without reading them.
struct FileIdentity {
    uint64_t device = 0;
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileIdentity&) const = default;
};

// stat() of `path`; nullopt when it cannot be read (the file was removed after loading).
std::optional<FileIdentity> file_identity(const std::string& path);

// XXH3-128 of `bytes` as 32 hex digits, high half first.
std::string content_hash(std::span<const uint8_t> bytes);

// The full hash of the bytes `model` was loaded from, from the cache in `db` when the file's
// identity is known there, else computed and cached. Throws SqliteError on database errors.
std::string model_content_hash(Database& db, const Model& model);

// What state keys are seeded with: the fingerprint, the full content hash and, for exact
// activations, that they are exact.
std::string model_state_identity(Database& db, const Model& model);

}  // namespace ember::sessions
