// Checking and repairing the message trees of a session database (`ember sessions check`).
// A file edited by hand, by another tool or damaged on disk can hold rows the chat never
// writes: a parent chain that loops (two messages each other's parent, a message its own), a
// parent that does not exist or belongs to another conversation, a current leaf that is gone,
// and token ids that are not a list of ids. The check walks every message once (no walk can
// run forever), and the repair keeps every message: it makes the message whose parent is bad
// a root, points a lost leaf at the conversation's newest message, and clears bad token ids
// (the reply is then tokenized again from its text).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sessions/sqlite.h"

namespace ember::sessions {

enum class ProblemKind {
    Cycle,          // message_id's parent chain loops; message_id is the oldest in the loop
    MissingParent,  // message_id's parent (other_id) does not exist
    ForeignParent,  // message_id's parent (other_id) is in another conversation
    MissingLeaf,    // the conversation's current leaf (other_id) is not one of its messages
    BadTokenIds,    // message_id's token ids are not whole int32s, or one is out of range
};

struct IntegrityProblem {
    ProblemKind kind;
    int64_t conversation = 0;  // row id
    std::string public_id;
    int64_t message_id = 0;
    int64_t other_id = 0;
    std::string detail;  // one line, naming the message
};

// Ids at or above this are reported as bad without knowing the model: no tokenizer has 16M
// entries, and a garbage blob read as int32s almost always holds such values.
inline constexpr int64_t kMaxPlausibleTokenId = int64_t{1} << 24;

// A model's vocabulary, for the replies of conversations recorded with that model: their
// ids must be below its size (the ids of other conversations are never fed to it).
struct VocabularyCheck {
    std::string model_fingerprint;
    int64_t vocab_size = 0;
};

// Every problem in the database, ordered by conversation and message.
std::vector<IntegrityProblem> check_integrity(Database& db,
                                              const VocabularyCheck* vocabulary = nullptr);

// Fixes `problems` (from check_integrity on this database) in one transaction.
void repair_integrity(Database& db, const std::vector<IntegrityProblem>& problems);

// Copies the database file (with its write-ahead log folded in first) to a new file next to
// it, "<path>.backup-<UTC time>", and returns that path. Other writers wait while it copies.
std::string backup_database(Database& db);

}  // namespace ember::sessions
