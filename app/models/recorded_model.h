// Reopening a saved conversation's own model: `ember chat --continue`, `--resume ID` and
// `ember replay --regenerate` without -m load the model the conversation was recorded with.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "sessions/session_store.h"

namespace ember::app {

// The model file `info` was recorded with: its stored absolute path while that file exists;
// else a model Ember finds by itself (`ember models`) whose fingerprint is the stored one
// (files of the same name tried first), with a note on `err` that it moved. Conversations
// saved before the path was stored (schema 5) have only the file name, found the same way.
// Throws one line naming the stored path (and how to go on) when no file matches.
std::string recorded_model_path(const sessions::ConversationInfo& info, std::FILE* err);

// The conversation --resume ID or --continue names in the database at `db_path` (empty: the
// default), before any model is loaded; throws the chat's one-line errors when there is no
// such conversation or database.
sessions::ConversationInfo conversation_to_resume(const std::string& db_path,
                                                  const std::string& resume_id);

}  // namespace ember::app
