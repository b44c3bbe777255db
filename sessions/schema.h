// The session database's schema, versioned with PRAGMA user_version. Each version is a
// forward migration applied in its own transaction, so a database written by any older
// ember opens (and is upgraded) and a crash mid-upgrade leaves the previous version intact.
#pragma once

#include "sessions/sqlite.h"

namespace ember::sessions {

// The version this build writes.
inline constexpr int kSchemaVersion = 7;

// Brings `db` from its user_version up to `target` (default: the latest). Throws SqliteError
// when the file was written by a newer ember (a higher version than this build knows).
void migrate(Database& db, int target = kSchemaVersion);

}  // namespace ember::sessions
