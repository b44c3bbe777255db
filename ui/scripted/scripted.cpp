#include "ui/scripted/scripted.h"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/generate/constrained.h"
#include "engine/util/bounded_json.h"
#include "ui/io/attachments.h"
#include "ui/io/progress.h"
#include "ui/io/terminal_text.h"

namespace ember::ui {

namespace {

using json = nlohmann::json;

// Writes everything or reports that the reader went away (EPIPE).
bool write_all(std::FILE* out, const std::string& s) {
    if (s.empty()) return true;
    if (std::fwrite(s.data(), 1, s.size(), out) != s.size()) return false;
    return std::fflush(out) == 0;
}

// One JSON line. Text that is not valid UTF-8 (a plain-text prompt can hold any bytes) shows
// as U+FFFD rather than failing the run: JSON strings cannot carry such bytes. `ascii_only`
// (for a terminal) escapes everything past ASCII, DEL and C1 controls included: nothing in
// the line can act on the terminal, and parsing it still gives the exact text.
std::string dump_line(const json& j, bool ascii_only) {
    return j.dump(-1, ' ', ascii_only, json::error_handler_t::replace) + "\n";
}

double rate(int64_t tokens, double seconds) {
    return seconds > 0 ? tokens / seconds : 0.0;
}

json turn_json(const TurnResult& r, bool show_thinking) {
    json j;
    j["reply"] = r.reply;
    // A remote server's reasoning arrives as text without a token count.
    const bool thought = r.thinking_tokens > 0 || !r.thinking.empty();
    j["thinking"] = show_thinking && thought ? json(r.thinking) : json(nullptr);
    j["thinking_tokens"] = r.thinking_tokens;
    j["thinking_end"] = std::string(thinking_end_name(r.thinking_end));
    j["tokens_reused"] = r.tokens_reused;
    j["tokens_evaluated"] = r.tokens_evaluated;
    // Where the store held more of the prompt than the live state: what the engine did with it
    // (restore, recompute, partial: resume_plan.h) and where the restored tokens came from.
    if (r.resume.path != ResumePath::None) {
        j["tokens_restored"] = r.tokens_restored;
        j["resume"] = std::string(resume_path_name(r.resume.path));
        if (!r.restored_from.empty()) j["restored_from"] = r.restored_from;
    }
    // A prompt whose reading was stopped (a signal): what it did not read.
    if (r.tokens_not_evaluated > 0) j["tokens_not_evaluated"] = r.tokens_not_evaluated;
    // A remote reply carries no token ids; its count is the server's.
    j["tokens_generated"] =
        r.ids.empty() ? r.stats.generated_tokens : static_cast<int64_t>(r.ids.size());
    j["prefill_tps"] = rate(r.tokens_evaluated, r.stats.prefill_seconds);
    j["decode_tps"] =
        rate(std::max<int64_t>(0, r.stats.generated_tokens - 1), r.stats.decode_seconds);
    j["ttft_ms"] = r.stats.ttft_seconds * 1000.0;
    const SpeculationStats& spec = r.stats.speculation;
    j["spec_drafted"] = spec.drafted;
    j["spec_accepted"] = spec.accepted;
    j["acceptance_rate"] = spec.acceptance_rate();
    j["finish"] = std::string(finish_reason_name(r.finish));
    if (r.seed) j["seed"] = *r.seed;
    if (!r.warnings.empty()) j["warnings"] = r.warnings;
    if (r.tokens_dropped > 0) {
        j["context_dropped_tokens"] = r.tokens_dropped;
        j["context_dropped_messages"] = r.messages_dropped;
    }
    return j;
}

// Streams reply text to `out` (plain output only), wrapping shown thinking in tags. A file or
// a pipe gets the reply's exact bytes; a terminal gets them through a TerminalTextStream, so
// an escape sequence the model produced shows instead of acting.
class PlainPrinter {
public:
    PlainPrinter(std::FILE* out, const ScriptedOptions& o)
        : out_(out), o_(o), terminal_(is_terminal(out)) {}
    bool operator()(const std::string& text, TextKind kind) {
        if (o_.jsonl_out) return true;
        if (kind == TextKind::Thinking) {
            if (!o_.show_thinking) return true;
            if (!in_thinking_ && !write("<think>\n")) return false;
            in_thinking_ = true;
        } else if (in_thinking_) {
            in_thinking_ = false;
            if (!write(held_back()) || !write("\n</think>\n\n")) return false;
        }
        return write(terminal_ ? safe_.feed(text) : text);
    }
    bool gone() const { return gone_; }
    // The end of the streamed text: what the terminal stream still holds back.
    std::string held_back() { return safe_.finish(); }
    bool write(const std::string& text) {
        if (!gone_ && !write_all(out_, text)) gone_ = true;
        return !gone_;
    }
    // A JSON line for this output.
    bool write_json(const json& j) { return write(dump_line(j, terminal_)); }
    // Whole text that is not the reply (tool calls and results), made safe for a terminal.
    std::string safe_text(const std::string& text) const {
        if (!terminal_) return text;
        TerminalTextStream stream;
        return stream.feed(text) + stream.finish();
    }

private:
    std::FILE* out_;
    const ScriptedOptions& o_;
    bool terminal_;
    TerminalTextStream safe_;
    bool in_thinking_ = false;
    bool gone_ = false;
};

enum class TurnOutcome { Answered, Failed, OutputGone, Stopped };

// --progress: a long prompt's evaluation as JSON lines on the reply's stream (JSONL), or as
// lines on `err`; one a second at most, and the last one when the prompt is read.
class PrefillReporter {
public:
    PrefillReporter(PlainPrinter& printer, std::FILE* err, const ScriptedOptions& o)
        : printer_(printer), err_(err), o_(o) {}
    void operator()(const PrefillProgress& p) {
        const bool finished = p.total > 0 && p.done >= p.total;
        if (!finished && p.seconds < next_) return;
        if (finished && !reported_) return;  // a short prompt: nothing to report
        next_ = p.seconds + 1.0;
        reported_ = true;
        if (o_.jsonl_out) {
            printer_.write_json(prefill_event(p));
        } else {
            std::fprintf(err_, "ember: reading the prompt: %s\n", prefill_text(p).c_str());
            std::fflush(err_);
        }
    }

private:
    PlainPrinter& printer_;
    std::FILE* err_;
    const ScriptedOptions& o_;
    double next_ = 1.0;  // the first report after a second
    bool reported_ = false;
};

// Commits a scripted run's messages to the session backend. A failing database is reported
// once and recording stops; the chat itself goes on (the replies matter more than the log).
class Recorder {
public:
    Recorder(const ScriptedOptions& o, std::FILE* err)
        : backend_(o.sessions), parent_(o.parent_id), err_(err) {}

    // Returns the new message's id (0 when not recording).
    int64_t commit(const ChatMessage& m, const TurnResult* turn, int64_t parent) {
        if (backend_ == nullptr || failed_) return 0;
        try {
            const int64_t id = backend_->commit(m, parent, turn);
            ++stored_;
            return id;
        } catch (const std::exception& e) {
            // Say what is lost: this message and what follows; what was stored stays.
            const std::string id = backend_->current_id();
            TextWriter(err_)
                .raw("ember: the session database failed, recording stops: ")
                .text(e.what())
                .raw("; not stored: this " + m.role + " message and the rest of the run (")
                .text(id.empty() ? std::string("no conversation was saved")
                                 : "conversation " + id + " keeps the " + std::to_string(stored_) +
                                       " message(s) stored before")
                .raw(")\n");
            failed_ = true;
            return 0;
        }
    }
    void sync_system(const ChatEngine& conv) {
        if (backend_ == nullptr || failed_) return;
        const auto& m = conv.messages();
        const std::string system =
            !m.empty() && m.front().role == "system" ? m.front().content : std::string();
        if (system == system_ && known_system_) return;
        known_system_ = true;
        system_ = system;
        try {
            backend_->set_system_prompt(system);
        } catch (const std::exception& e) {
            TextWriter(err_)
                .raw("ember: the session database failed, recording stops: ")
                .text(e.what())
                .raw("\n");
            failed_ = true;
        }
    }
    int64_t parent() const { return parent_; }
    void set_parent(int64_t id) { parent_ = id; }
    bool failed() const { return failed_; }

private:
    SessionBackend* backend_;
    int64_t parent_;
    std::FILE* err_;
    std::string system_;
    bool known_system_ = false;
    bool failed_ = false;
    int64_t stored_ = 0;  // messages this run stored
};

// What came of one tool call of a reply: the call and the tool message that answered it.
struct AnsweredCall {
    ToolCall call;
    ChatMessage answer;
    bool ran = false;
};

// Prints a committed reply (its warnings, its tool calls and what came of them) the way the
// options ask.
TurnOutcome report_reply(const ChatReply& reply, PlainPrinter& printer, std::FILE* err,
                         const ScriptedOptions& o, const std::vector<AnsweredCall>& calls);

// Answers the calls of the reply just committed (the last message): runs them with
// auto-approval, else answers each with a tool message saying it did not run; past the round
// limit none runs. Each answer is committed under the one before.
std::vector<AnsweredCall> answer_calls(ChatEngine& conv, const ScriptedOptions& o, Recorder& rec,
                                       int rounds) {
    std::vector<AnsweredCall> answered;
    const ChatMessage& reply = conv.messages().back();
    if (!o.tools.enabled() || reply.role != "assistant") return answered;
    const std::vector<ToolCall> calls = reply.tool_calls;
    for (const ToolCall& call : calls) {
        AnsweredCall a{call, {}, false};
        if (rounds >= o.tools.max_rounds) {
            a.answer = tool_not_run_message(call, round_limit_reason(o.tools.max_rounds));
        } else if (!o.tools.auto_approve) {
            a.answer = tool_not_run_message(call, kNoOneToApprove);
        } else {
            a.answer = tool_result_message(call, run_call(o.tools, call));
            a.ran = true;
        }
        const int64_t id = rec.commit(a.answer, nullptr, rec.parent());
        if (id != 0) rec.set_parent(id);
        conv.add_message(a.answer);
        answered.push_back(std::move(a));
    }
    return answered;
}

// The reply to what the conversation holds (a prompt, or tool results): generated, committed
// and its calls answered. False when no reply could start (reported on `err` and, in JSONL,
// as an error object); the caller takes its prompt back out then.
std::optional<ChatReply> generate_reply(ChatEngine& conv, Sampler& sampler, ReplySeeds& seeds,
                                        const GenerateOptions& options, PlainPrinter& printer,
                                        std::FILE* err, const ScriptedOptions& o, Recorder& rec) {
    ChatReply reply;
    GenerateOptions generation = options;
    // A long prompt's progress: a bar on a terminal, events or lines when asked (--progress).
    std::optional<TerminalProgress> bar;
    if (is_terminal(err)) bar.emplace(err);
    PrefillReporter reporter(printer, err, o);
    if (bar || o.progress) {
        generation.on_prefill = [&](const PrefillProgress& p) {
            if (bar) bar->prefill(p);
            if (o.progress) reporter(p);
        };
    }
    const StopRequested stop = [&o] { return o.stop_signal && o.stop_signal() != 0; };
    try {
        reply = respond_seeded(conv, sampler, seeds, generation, std::ref(printer), stop);
        if (bar) bar->clear();
    } catch (const std::exception& e) {
        if (bar) bar->clear();
        const bool overflow = dynamic_cast<const ContextOverflow*>(&e) != nullptr;
        TextWriter(err)
            .raw(overflow ? "ember: prompt skipped: " : "ember: no reply: ")
            .text(e.what())
            .raw("\n");
        if (o.jsonl_out) {
            const json j = {{"reply", ""},
                            {"thinking", nullptr},
                            {"finish", overflow ? "context" : "error"},
                            {"error", e.what()},
                            {"tokens_reused", 0},
                            {"tokens_evaluated", 0}};
            printer.write_json(j);
        }
        return std::nullopt;
    }
    // The reply is complete (or cut short by a closed pipe or a lost server): commit it.
    const int64_t reply_id = rec.commit(conv.messages().back(), &reply.turn, rec.parent());
    if (reply_id != 0) rec.set_parent(reply_id);
    return reply;
}

// One turn: add the user message, stream or collect the reply, print it. A prompt that
// cannot fit the context, or that a remote server does not answer, is reported (and, in
// JSONL, answered with an error object), taken back out of the conversation, and the run goes
// on. A reply that broke off is kept, printed and reported.

TurnOutcome answer(ChatEngine& conv, Sampler& sampler, ReplySeeds& seeds, const std::string& prompt,
                   std::FILE* out, std::FILE* err, const ScriptedOptions& o, Recorder& rec,
                   const std::shared_ptr<const grammar::Grammar>& turn_grammar) {
    // A constrained turn samples its answer through the grammar (engine/grammar).
    GenerateOptions generation = o.generation;
    std::optional<grammar::GrammarConstraint> constraint;
    if (turn_grammar) {
        if (!o.token_trie) {
            TextWriter(err).raw("ember: no reply: a schema or grammar needs the local engine\n");
            return TurnOutcome::Failed;
        }
        constraint.emplace(turn_grammar, o.token_trie());
        generation.constraint = &*constraint;
    }
    if (o.tools.enabled()) {
        // A constrained answer is the schema's, not a call: that turn offers no tools.
        conv.set_tools(turn_grammar ? ToolOptions{} : tool_options(o.tools, /*first=*/true));
    }
    const ChatMessage user{"user", prompt, {}, {}};
    conv.add_message(user);
    rec.sync_system(conv);
    // A prompt that then does not fit stays in the store as a branch nothing answers.
    const int64_t parent_before = rec.parent();
    const int64_t user_id = rec.commit(user, nullptr, rec.parent());
    if (user_id != 0) rec.set_parent(user_id);
    PlainPrinter printer(out, o);
    std::optional<ChatReply> reply =
        generate_reply(conv, sampler, seeds, generation, printer, err, o, rec);
    if (!reply) {
        conv.pop_message();
        rec.set_parent(parent_before);
        return printer.gone() ? TurnOutcome::OutputGone : TurnOutcome::Failed;
    }
    for (int rounds = 0;; ++rounds) {
        // Stopped by a signal: the reply is reported as it got ("finish": "cancelled"), its
        // calls are not run, and its state is not stored (a cache: storing a long prompt's
        // rows takes seconds), nor that of a prompt read only in part.
        const bool stopping = o.stop_signal && o.stop_signal() != 0;
        const std::vector<AnsweredCall> calls =
            stopping ? std::vector<AnsweredCall>{} : answer_calls(conv, o, rec, rounds);
        const TurnOutcome outcome = report_reply(*reply, printer, err, o, calls);
        if (stopping) return outcome == TurnOutcome::Answered ? TurnOutcome::Stopped : outcome;
        // The state behind the reply is stored once the reply is out.
        if (reply->turn.tokens_not_evaluated == 0) conv.store_pending_state();
        const bool any_ran =
            std::any_of(calls.begin(), calls.end(), [](const AnsweredCall& a) { return a.ran; });
        if (outcome != TurnOutcome::Answered || !any_ran) return outcome;
        // The model reads the results and goes on, choosing freely whether to call again.
        conv.set_tools(tool_options(o.tools, /*first=*/false));
        reply = generate_reply(conv, sampler, seeds, generation, printer, err, o, rec);
        if (!reply) return printer.gone() ? TurnOutcome::OutputGone : TurnOutcome::Failed;
    }
}

json calls_json(const std::vector<AnsweredCall>& calls) {
    json out = json::array();
    for (const AnsweredCall& a : calls) {
        out.push_back({{"id", a.call.id}, {"name", a.call.name}, {"arguments", a.call.arguments}});
    }
    return out;
}

json results_json(const std::vector<AnsweredCall>& calls) {
    json out = json::array();
    for (const AnsweredCall& a : calls) {
        out.push_back({{"tool_call_id", a.call.id},
                       {"name", a.call.name},
                       {"ran", a.ran},
                       {"content", a.answer.content}});
    }
    return out;
}

// Plain output: each call on a line of its own, then what came of it.
std::string calls_text(const std::vector<AnsweredCall>& calls) {
    std::string text;
    for (const AnsweredCall& a : calls) {
        text += "[tool call] " + describe_call(a.call) + "\n";
        if (a.ran) {
            text += "[tool result] " + a.call.name + "\n" + a.answer.content;
            if (!a.answer.content.empty() && a.answer.content.back() != '\n') text += "\n";
            text += "[end of tool result]\n";
        } else {
            text += "[not run] " + a.answer.content + "\n";
        }
    }
    return text;
}

TurnOutcome report_reply(const ChatReply& reply, PlainPrinter& printer, std::FILE* err,
                         const ScriptedOptions& o, const std::vector<AnsweredCall>& calls) {
    const TurnResult& r = reply.turn;
    if (printer.gone()) return TurnOutcome::OutputGone;
    for (const auto& warning : r.warnings) {
        TextWriter(err).raw("ember: warning: ").text(warning).raw("\n");
    }
    if (r.tokens_dropped > 0) {
        std::fprintf(
            err, "ember: context full: dropped %lld tokens (%lld messages) of the oldest turns\n",
            static_cast<long long>(r.tokens_dropped), static_cast<long long>(r.messages_dropped));
    }
    json j;
    if (o.jsonl_out) {
        j = turn_json(r, o.show_thinking);
        if (!reply.interruption.empty()) j["error"] = reply.interruption;
        if (!calls.empty()) {
            j["tool_calls"] = calls_json(calls);
            j["tool_results"] = results_json(calls);
        }
    }
    // Plain output: the reply's line (none for a reply that is only calls), then its calls.
    std::string plain = printer.held_back();
    if (!plain.empty() || !r.reply.empty() || calls.empty()) plain += "\n";
    const bool written = o.jsonl_out ? printer.write_json(j)
                                     : printer.write(plain + printer.safe_text(calls_text(calls)));
    if (!reply.interruption.empty()) {
        TextWriter(err)
            .raw("ember: the reply broke off: ")
            .text(reply.interruption)
            .raw(" (what arrived is kept)\n");
        return written ? TurnOutcome::Failed : TurnOutcome::OutputGone;
    }
    return written ? TurnOutcome::Answered : TurnOutcome::OutputGone;
}

// The prompt on one JSONL line, or an empty optional after reporting what is wrong with it.
// A system message replaces the system prompt and yields no prompt either.
// A line's "schema" (a JSON Schema object, or true) constrains its reply; `grammar` gets it
// compiled (null without one).
std::optional<std::string> jsonl_prompt(const std::string& line, int64_t line_no, ChatEngine& conv,
                                        std::FILE* err, bool& bad,
                                        std::shared_ptr<const grammar::Grammar>& grammar) {
    const auto complain = [&](const std::string& what) {
        TextWriter(err)
            .raw("ember: stdin line " + std::to_string(line_no) + ": ")
            .text(what)
            .raw("; line skipped\n");
        bad = true;
        return std::nullopt;
    };
    json j;
    try {
        j = parse_json_bounded<json>(line, {}, "");  // complain() names the line
    } catch (const JsonLimitError& e) {
        return complain(e.what());
    }
    if (j.is_discarded()) return complain("not valid JSON");
    if (!j.is_object()) return complain("not a JSON object");
    grammar = nullptr;
    if (j.contains("schema")) {
        if (!j["schema"].is_object() && !j["schema"].is_boolean()) {
            return complain("\"schema\" must be a JSON Schema (an object)");
        }
        // Parsed again keeping the properties' order, which the output follows.
        const auto ordered = parse_json_bounded(line, {}, "");
        try {
            grammar =
                compile_output_format({OutputFormatKind::JsonSchema, ordered.at("schema").dump()});
        } catch (const grammar::GrammarError& e) {
            return complain(std::string("\"schema\": ") + e.what());
        }
    }
    if (j.contains("prompt")) {
        if (!j["prompt"].is_string()) return complain("\"prompt\" must be a string");
        return j["prompt"].get<std::string>();
    }
    if (!j.contains("content") || !j["content"].is_string()) {
        return complain("expected {\"prompt\": TEXT} or {\"role\": \"user\", \"content\": TEXT}");
    }
    const json role = j.value("role", json("user"));
    if (role == "system") {
        // Refused as a prompt holding one is (see run_scripted), not stored.
        const std::string system = j["content"].get<std::string>();
        if (const size_t nul = system.find('\0'); nul != std::string::npos) {
            return complain("the system message holds a NUL byte (byte " + std::to_string(nul + 1) +
                            ")");
        }
        conv.set_system(system);
        return std::nullopt;
    }
    if (role != "user") return complain("role " + role.dump() + " is not \"user\" or \"system\"");
    return j["content"].get<std::string>();
}

}  // namespace

int run_single_prompt(ChatEngine& conversation, Sampler& sampler, const std::string& prompt,
                      std::FILE* out, std::FILE* err, const ScriptedOptions& options) {
    Recorder rec(options, err);
    ReplySeeds seeds(options.seed);
    const TurnOutcome outcome =
        answer(conversation, sampler, seeds, join_attachments(options.attachments, prompt), out,
               err, options, rec, options.grammar);
    if (const int signal_number = options.stop_signal ? options.stop_signal() : 0) {
        return 128 + signal_number;
    }
    return outcome == TurnOutcome::Failed || rec.failed() ? 1 : 0;
}

namespace {

enum class LineRead { Line, TooLong, End };

// The next line of `in` (without its '\n'), holding at most `max` bytes: a longer one is not
// read further (stdin may be /dev/zero, or one line of gigabytes).
LineRead read_line(std::istream& in, std::string& line, size_t max) {
    line.clear();
    std::streambuf* buf = in.rdbuf();
    for (;;) {
        const int c = buf->sbumpc();
        if (c == std::char_traits<char>::eof()) {
            return line.empty() ? LineRead::End : LineRead::Line;
        }
        if (c == '\n') return LineRead::Line;
        if (line.size() >= max) return LineRead::TooLong;
        line += static_cast<char>(c);
    }
}

}  // namespace

int run_scripted(ChatEngine& conversation, Sampler& sampler, std::istream& in, std::FILE* out,
                 std::FILE* err, const ScriptedOptions& options) {
    std::string line;
    int64_t line_no = 0;
    bool any_failed = false;
    bool attached = false;
    Recorder rec(options, err);
    ReplySeeds seeds(options.seed);
    const auto stop_signal = [&options] { return options.stop_signal ? options.stop_signal() : 0; };
    for (;;) {
        if (stop_signal() != 0) break;
        // A signal while waiting for input ends the read (EINTR): End.
        const LineRead read = read_line(in, line, kMaxScriptLineBytes);
        if (read == LineRead::End) break;
        ++line_no;
        if (read == LineRead::TooLong) {
            // The rest of such a line is not read: the run stops here.
            std::fprintf(err,
                         "ember: stdin line %lld is longer than %zu MiB (the limit on a line of "
                         "scripted input); stopping\n",
                         static_cast<long long>(line_no), kMaxScriptLineBytes >> 20);
            any_failed = true;
            break;
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::optional<std::string> prompt;
        std::shared_ptr<const grammar::Grammar> turn_grammar = options.grammar;
        if (options.jsonl_in) {
            if (line.find_first_not_of(" \t") == std::string::npos) continue;
            std::shared_ptr<const grammar::Grammar> line_grammar;
            prompt = jsonl_prompt(line, line_no, conversation, err, any_failed, line_grammar);
            if (line_grammar) turn_grammar = line_grammar;
        } else if (!line.empty()) {
            prompt = line;
        }
        if (!prompt) continue;
        // A NUL byte in a text prompt means binary input (or a stray \u0000): the tokenizer
        // would take it, but SQLite's text functions (full-text search, the sqlite3 shell) and
        // anything reading C strings stop at it, so the saved prompt would read cut short.
        // Refused, with where it is.
        if (const size_t nul = prompt->find('\0'); nul != std::string::npos) {
            std::fprintf(err,
                         "ember: stdin line %lld: the prompt holds a NUL byte (byte %zu); "
                         "line skipped\n",
                         static_cast<long long>(line_no), nul + 1);
            any_failed = true;
            continue;
        }
        if (!attached) {
            // -f FILE: before the first prompt (ui/io/attachments.h).
            *prompt = join_attachments(options.attachments, *prompt);
            attached = true;
        }
        const TurnOutcome outcome =
            answer(conversation, sampler, seeds, *prompt, out, err, options, rec, turn_grammar);
        if (outcome == TurnOutcome::OutputGone || outcome == TurnOutcome::Stopped) break;
        if (outcome == TurnOutcome::Failed) any_failed = true;
    }
    if (const int signal_number = stop_signal()) return 128 + signal_number;
    return any_failed || rec.failed() ? 1 : 0;
}

}  // namespace ember::ui
