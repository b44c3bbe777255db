#include "sessions/integrity.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "engine/util/utc_time.h"

namespace ember::sessions {

namespace {

namespace fs = std::filesystem;

struct Row {
    int64_t conversation = 0;
    int64_t parent = 0;  // 0: a root
};

// Why a token_ids blob is not a list of ids below `limit`; empty when it is one.
std::string token_ids_fault(const std::vector<uint8_t>& blob, int64_t limit,
                            const char* limit_name) {
    if (blob.size() % 4 != 0) {
        return std::to_string(blob.size()) + " bytes, not a whole number of ids";
    }
    for (int32_t id : blob_to_tokens(blob)) {
        if (id < 0 || id >= limit) {
            return "id " + std::to_string(id) + " is outside " + limit_name;
        }
    }
    return {};
}

}  // namespace

std::vector<IntegrityProblem> check_integrity(Database& db, const VocabularyCheck* vocabulary) {
    std::unordered_map<int64_t, std::string> public_ids;
    std::unordered_map<int64_t, int64_t> leaves;
    {
        Statement s =
            db.prepare("SELECT id, public_id, COALESCE(current_leaf, 0) FROM conversations");
        while (s.step()) {
            public_ids[s.column_int(0)] = s.column_text(1);
            leaves[s.column_int(0)] = s.column_int(2);
        }
    }
    std::vector<IntegrityProblem> problems;
    auto add = [&](ProblemKind kind, int64_t conversation, int64_t message, int64_t other,
                   std::string detail) {
        // Messages of a conversation that is gone (deleted with foreign keys off) are named
        // by its row id.
        const auto p = public_ids.find(conversation);
        std::string name;
        if (p != public_ids.end()) {
            name = p->second;
        } else {
            // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on "#" + a temporary.
            name = std::to_string(conversation);
            name.insert(0, 1, '#');
            name += " (no such conversation)";
        }
        problems.push_back(
            {kind, conversation, std::move(name), message, other, std::move(detail)});
    };

    std::unordered_map<int64_t, Row> rows;
    std::vector<int64_t> order;  // message ids, ascending
    {
        Statement s = db.prepare(
            "SELECT m.id, m.conversation_id, COALESCE(m.parent_id, 0), m.token_ids, "
            "COALESCE(c.model_fingerprint, '') FROM messages m "
            "LEFT JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id");
        while (s.step()) {
            const int64_t id = s.column_int(0);
            rows[id] = {s.column_int(1), s.column_int(2)};
            order.push_back(id);
            const bool same_model = vocabulary != nullptr && vocabulary->vocab_size > 0 &&
                                    s.column_text(4) == vocabulary->model_fingerprint;
            const std::string fault =
                same_model
                    ? token_ids_fault(s.column_blob(3), vocabulary->vocab_size,
                                      "the model's vocabulary")
                    : token_ids_fault(s.column_blob(3), kMaxPlausibleTokenId, "any vocabulary");
            if (!fault.empty()) {
                add(ProblemKind::BadTokenIds, s.column_int(1), id, 0,
                    "message " + std::to_string(id) + " has bad token ids (" + fault + ")");
            }
        }
    }

    // Parents that are not there, or not in the message's own conversation: the chat's walk
    // from a leaf stops at them, so they are not followed when looking for loops either.
    std::unordered_map<int64_t, int64_t> next;  // message -> a parent the walk follows
    for (int64_t id : order) {
        const Row& r = rows[id];
        if (r.parent == 0) continue;
        const auto p = rows.find(r.parent);
        if (p == rows.end()) {
            add(ProblemKind::MissingParent, r.conversation, id, r.parent,
                "message " + std::to_string(id) + " has a parent (" + std::to_string(r.parent) +
                    ") that does not exist");
        } else if (p->second.conversation != r.conversation) {
            add(ProblemKind::ForeignParent, r.conversation, id, r.parent,
                "message " + std::to_string(id) + " has a parent (" + std::to_string(r.parent) +
                    ") in another conversation");
        } else {
            next[id] = r.parent;
        }
    }

    // Loops: each message is walked once. A walk marks what it passes with its own number;
    // reaching a message marked by the same walk closes a loop, one marked by an earlier walk
    // joins a part already checked.
    std::unordered_map<int64_t, int64_t> walk_of;
    int64_t walk = 0;
    for (int64_t start : order) {
        if (walk_of.count(start) != 0) continue;
        ++walk;
        std::vector<int64_t> path;
        int64_t at = start;
        for (;;) {
            walk_of[at] = walk;
            path.push_back(at);
            const auto n = next.find(at);
            if (n == next.end()) break;
            at = n->second;
            const auto w = walk_of.find(at);
            if (w == walk_of.end()) continue;
            if (w->second == walk) {
                const auto begin = std::find(path.begin(), path.end(), at);
                const std::vector<int64_t> loop(begin, path.end());
                const int64_t oldest = *std::min_element(loop.begin(), loop.end());
                std::string members;
                for (int64_t m : loop) members += (members.empty() ? "" : ", ") + std::to_string(m);
                add(ProblemKind::Cycle, rows[oldest].conversation, oldest, 0,
                    loop.size() == 1 ? "message " + members + " is its own parent"
                                     : "the parents of messages " + members + " form a loop");
            }
            break;
        }
    }

    for (const auto& [conversation, leaf] : leaves) {
        if (leaf == 0) continue;
        const auto r = rows.find(leaf);
        if (r == rows.end() || r->second.conversation != conversation) {
            add(ProblemKind::MissingLeaf, conversation, 0, leaf,
                "its current message (" + std::to_string(leaf) + ") is not one of its messages");
        }
    }

    std::stable_sort(problems.begin(), problems.end(),
                     [](const IntegrityProblem& a, const IntegrityProblem& b) {
                         if (a.conversation != b.conversation)
                             return a.conversation < b.conversation;
                         return a.message_id < b.message_id;
                     });
    return problems;
}

void repair_integrity(Database& db, const std::vector<IntegrityProblem>& problems) {
    Transaction tx(db);
    for (const IntegrityProblem& p : problems) {
        switch (p.kind) {
            case ProblemKind::Cycle:
            case ProblemKind::MissingParent:
            case ProblemKind::ForeignParent: {
                // The message becomes a root: its branch stays readable from it down, and
                // nothing is deleted (for a loop, the oldest message was most likely the root
                // before the damage).
                Statement s = db.prepare("UPDATE messages SET parent_id = NULL WHERE id = ?");
                s.bind(1, p.message_id).run();
                break;
            }
            case ProblemKind::MissingLeaf: {
                Statement s = db.prepare(
                    "UPDATE conversations SET current_leaf = "
                    "(SELECT MAX(id) FROM messages WHERE conversation_id = ?1) WHERE id = ?1");
                s.bind(1, p.conversation).run();
                break;
            }
            case ProblemKind::BadTokenIds: {
                // Without ids the reply is tokenized again from its text, as one from a
                // remote server is.
                Statement s = db.prepare("UPDATE messages SET token_ids = NULL WHERE id = ?");
                s.bind(1, p.message_id).run();
                break;
            }
        }
    }
    tx.commit();
}

std::string backup_database(Database& db) {
    const std::string& path = db.path();
    if (path.empty() || path == ":memory:") {
        throw SqliteError("session database '" + path + "' is not a file: nothing to back up");
    }
    // Fold the write-ahead log into the file first, so the copy of the file is the whole
    // database (a no-op, leaving the file as it is, when the log is empty).
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    std::string backup = path + ".backup-" + utc_now(UtcFormat::FileNameStamp);
    std::error_code ec;
    for (int n = 2; fs::exists(backup, ec); ++n) {
        backup = path + ".backup-" + utc_now(UtcFormat::FileNameStamp) + "-" + std::to_string(n);
    }
    // The write lock keeps other ember processes from committing while the file is copied;
    // anything committed between the checkpoint and the lock is in the log, copied with it.
    Transaction lock(db);
    fs::copy_file(path, backup, fs::copy_options::none, ec);
    if (ec) {
        throw SqliteError("session database '" + path + "': cannot write the backup '" + backup +
                          "': " + ec.message());
    }
    const std::string wal = path + "-wal";
    if (fs::exists(wal, ec) && fs::file_size(wal, ec) > 0) {
        fs::copy_file(wal, backup + "-wal", fs::copy_options::none, ec);
        if (ec) {
            throw SqliteError("session database '" + path + "': cannot write the backup '" +
                              backup + "-wal': " + ec.message());
        }
    }
    lock.commit();
    return backup;
}

}  // namespace ember::sessions
