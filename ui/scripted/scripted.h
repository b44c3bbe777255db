// Scripted mode: prompts from a stream, answers to another, one conversation across all of
// them with the state kept warm between turns.
#pragma once

#include <cstdio>
#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/grammar/token_mask.h"
#include "ui/chat/chat_engine.h"
#include "ui/chat/session_backend.h"
#include "ui/io/attachments.h"
#include "ui/tools/tool_turns.h"

namespace ember::ui {

struct ScriptedOptions {
    bool jsonl_in = false;   // {"role":"user","content":...} or {"prompt":...} per line
    bool jsonl_out = false;  // one JSON object per reply
    GenerateOptions generation;
    // Where turns are recorded (null: nowhere). The prompt is committed as soon as it is read,
    // the reply with its stats once it is complete; `parent_id` is the message the first
    // prompt answers to (the leaf of a resumed conversation, 0 for a new one).
    SessionBackend* sessions = nullptr;
    int64_t parent_id = 0;
    // The first reply's seed (later replies take the next numbers); nullopt: a fresh random
    // seed per reply (ReplySeeds).
    std::optional<uint64_t> seed;
    // Joined before the first prompt (-f FILE, stdin with -p; ui/io/attachments.h).
    std::vector<Attachment> attachments;
    bool show_thinking = false;  // print the reasoning (plain: before the answer, dimmed
                                 // nowhere; JSONL: in "thinking") instead of omitting it
    // Constrained answers (--json-schema, --grammar): every reply's answer follows this
    // grammar, unless its JSONL line carries its own "schema". Null: free text.
    std::shared_ptr<const grammar::Grammar> grammar;
    // The model's vocabulary for the grammar mask (built on first use); empty when replies
    // come from elsewhere (a remote server), which refuses constrained turns.
    std::function<std::shared_ptr<const grammar::TokenTrie>()> token_trie;
    // Tools the model may call (--tools, --builtin-tools). No one is there to say yes, so a
    // call runs only with `tools.auto_approve` (--yes-tools); otherwise it is printed and
    // answered with a `tool` message saying it did not run. Plain output prints each call
    // (and result) as lines starting "[tool call]" ("[tool result]"); JSONL gives the reply
    // "tool_calls" and "tool_results". With --yes-tools the model then reads the results and
    // replies again (another line), up to tools.max_rounds times.
    ChatToolSettings tools;
    // A terminating signal (SIGINT, SIGTERM, SIGHUP) that asked the run to stop, 0: none.
    // Polled while a reply is produced (between the layers of a long prompt, at each token):
    // the reply stops, is committed and reported (JSONL: "finish": "cancelled"), and the run
    // ends with 128 + the signal's number. Empty: never.
    std::function<int()> stop_signal;
    // Report a long prompt's evaluation as it goes (--progress): JSON lines
    // {"event": "progress", ...} on `out` with jsonl_out, lines on `err` otherwise. A terminal
    // `err` gets a progress bar redrawn in place either way.
    bool progress = false;
};

// A line of scripted input (a prompt, a JSONL object) holds at most this many bytes; a longer
// one stops the run with an error naming the limit (its rest is never read).
inline constexpr size_t kMaxScriptLineBytes = size_t{64} << 20;

// Runs prompts from `in` until EOF. A line that is not a valid request (named by its line
// number), a prompt too long for the context and a prompt a remote server did not answer are
// reported on `err` and skipped, and the run goes on; a reply that broke off (a remote server
// lost mid-reply) is kept as far as it got and reported. The status is then 1, else 0; after
// options.stop_signal, 128 + the signal. A closed output pipe ends quietly.
int run_scripted(ChatEngine& engine, Sampler& sampler, std::istream& in, std::FILE* out,
                 std::FILE* err, const ScriptedOptions& options);

// Answers a single prompt (ember chat -p TEXT).
int run_single_prompt(ChatEngine& engine, Sampler& sampler, const std::string& prompt,
                      std::FILE* out, std::FILE* err, const ScriptedOptions& options);

}  // namespace ember::ui
