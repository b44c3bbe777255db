// ember sessions: list, show, search, export, remove and rename saved conversations, the
// state store's sizes, hit rates and evictions, and a check (and repair) of the message trees.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "app/cli/cli_checks.h"
#include "app/cli/stop_signals.h"
#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "app/store/session_adapter.h"
#include "app/store/state_stats_text.h"
#include "engine/model/model.h"
#include "engine/util/utc_time.h"
#include "engine/util/utf8.h"
#include "sessions/integrity.h"
#include "sessions/session_store.h"
#include "sessions/state_store.h"
#include "ui/io/progress.h"
#include "ui/io/terminal_text.h"
#include "ui/tui/text.h"

namespace ember::app {

namespace {

namespace fs = std::filesystem;

struct SessionsOptions {
    std::string db;
    int64_t limit = 50;
    std::string id;
    std::string text;
    std::string title;
    std::string format = "md";
    std::string output;
    std::string state_cap = kDefaultStateCap;
    bool repair = false;
    bool prune_state = false;  // prune: the state blobs
    std::string older_than;    // prune: only what was not used for this long ("7d")
    std::string model;         // check: the vocabulary to hold its conversations' reply ids to
};

std::string db_path(const SessionsOptions& o) {
    return o.db.empty() ? default_db_path() : o.db;
}

// The database, or an empty private one when the file does not exist yet: looking at
// sessions should not create a database.
// A database that cannot be written is read as it is (DbUse::read) or refused with one line
// (DbUse::write: `instead` says what to do).
std::unique_ptr<sessions::Database> open_for_reading(const SessionsOptions& o,
                                                     DbUse use = DbUse::read,
                                                     const std::string& instead = {}) {
    const std::string path = db_path(o);
    std::error_code ec;
    check_db_path(path);                // a URI or a device is refused as chat refuses it
    check_named_db(o.db, DbUse::read);  // a --db typed wrong is said, not an empty list
    if (path != ":memory:" && !fs::exists(path, ec)) return open_session_db(":memory:");
    return open_session_db(path, use, instead);
}

sessions::ConversationInfo find_or_throw(sessions::SessionStore& store, const SessionsOptions& o) {
    auto info = store.find(o.id);
    if (!info) {
        throw std::runtime_error("no saved conversation '" + o.id + "' in " + db_path(o) +
                                 " (ember sessions list shows them)");
    }
    return *info;
}

std::string one_line(std::string text, size_t width) {
    for (char& c : text) {
        if (c == '\n' || c == '\t' || c == '\r') c = ' ';
    }
    if (text.size() > width) {
        text = text.substr(0, utf8_cut(text, width - 3)) + "...";
    }
    return text;
}

// `text` on one line in exactly `columns` terminal columns: cut ("...") or padded by display
// width, so CJK titles (two columns a character) and accented ones line up like ASCII.
std::string in_columns(std::string text, int columns) {
    for (char& c : text) {
        if (c == '\n' || c == '\t' || c == '\r') c = ' ';
    }
    int width = ui::tui::display_width(text);
    if (width > columns) {
        text = std::string(ui::tui::fit_prefix(text, columns - 3)) + "...";
        width = ui::tui::display_width(text);
    }
    text.append(static_cast<size_t>(std::max(0, columns - width)), ' ');
    return text;
}

// Everything read from the database (ids and roles too: the file may come from anyone) and
// everything the user typed is written through ui::TextWriter: on a terminal its control
// characters show as visible stand-ins, to a file or a pipe it goes as it is.

int run_list(const SessionsOptions& o) {
    auto db = open_for_reading(o);
    sessions::SessionStore store(*db);
    const auto all = store.list(o.limit);
    ui::TextWriter out(stdout);
    if (all.empty()) {
        out.raw("no saved conversations in ").text(db_path(o)).raw("\n");
        return 0;
    }
    std::printf("%-10s %-40s %-24s %5s  %s\n", "ID", "TITLE", "MODEL", "TURNS", "UPDATED");
    for (const auto& info : all) {
        const ui::SessionSummary s = summarize(info);
        std::printf("%-10s %s %s %5lld  %s\n", out.shown(s.id).c_str(),
                    in_columns(s.title.empty() ? "(untitled)" : out.shown(s.title), 40).c_str(),
                    in_columns(out.shown(s.model), 24).c_str(), static_cast<long long>(s.turns),
                    s.updated.c_str());
    }
    return 0;
}

int run_show(const SessionsOptions& o) {
    auto db = open_for_reading(o);
    sessions::SessionStore store(*db);
    const auto info = find_or_throw(store, o);
    // Read before anything is printed: a damaged conversation is one error line, not a
    // header followed by one.
    const auto branch = store.branch(info);
    ui::TextWriter out(stdout);
    out.raw("id:      ").text(info.public_id).raw("\ntitle:   ").text(info.title);
    out.raw("\nmodel:   ").text(info.model).raw("\n");
    std::printf("created: %s\nupdated: %s\n", sessions::local_time(info.created_at).c_str(),
                sessions::local_time(info.updated_at).c_str());
    std::printf("turns:   %lld (%lld messages in all branches)\n",
                static_cast<long long>(info.turns), static_cast<long long>(info.message_count));
    if (!info.system_prompt.empty()) out.raw("system:  ").text(info.system_prompt).raw("\n");
    for (const auto& m : branch) {
        out.raw("\n[").text(m.role);
        std::printf(" #%lld", static_cast<long long>(m.id));
        // The model that wrote a reply (a conversation may change models with /model).
        if (!m.origin.model.empty()) out.raw(" by ").text(m.origin.model);
        out.raw("]");
        if (m.stats) {
            const auto& s = *m.stats;
            std::printf(
                " %lld tokens; prompt %lld: %lld reused (%lld restored), %lld evaluated; %s",
                static_cast<long long>(s.tokens_generated), static_cast<long long>(s.prompt_tokens),
                static_cast<long long>(s.tokens_reused), static_cast<long long>(s.tokens_restored),
                static_cast<long long>(s.tokens_evaluated), out.shown(s.finish).c_str());
        }
        out.raw("\n").text(m.content).raw("\n");
    }
    return 0;
}

int run_search(const SessionsOptions& o) {
    auto db = open_for_reading(o);
    sessions::SessionStore store(*db);
    const auto hits = store.search(o.text, o.limit);
    ui::TextWriter out(stdout);
    if (hits.empty()) {
        out.raw("no messages match '").text(o.text).raw("'\n");
        return 0;
    }
    for (const auto& h : hits) {
        std::printf("%-10s %-30s %-9s %s\n", out.shown(h.conversation).c_str(),
                    one_line(out.shown(h.title), 30).c_str(), out.shown(h.role).c_str(),
                    one_line(out.shown(h.snippet), 100).c_str());
    }
    return 0;
}

int run_export(const SessionsOptions& o) {
    auto db = open_for_reading(o);
    sessions::SessionStore store(*db);
    const auto info = find_or_throw(store, o);
    const bool to_stdout = o.output.empty() || o.output == "-";
    ui::TextWriter shown(stdout);
    // JSON on a terminal escapes everything past ASCII: safe to show and still exact.
    const std::string text = o.format == "json"
                                 ? store.export_json(info, to_stdout && shown.terminal())
                                 : store.export_markdown(info);
    if (to_stdout) {
        // A pipe gets the export as stored; a terminal sees Markdown with stand-ins.
        shown.text(text);
        return 0;
    }
    std::ofstream out(o.output, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + o.output + "'");
    return 0;
}

int run_remove(const SessionsOptions& o) {
    auto db = open_for_reading(o, DbUse::write, "nothing was removed");
    sessions::SessionStore store(*db);
    const auto info = find_or_throw(store, o);
    store.remove(info.id);
    ui::TextWriter(stdout)
        .raw("removed ")
        .text(info.public_id)
        .raw(" (")
        .text(info.title)
        .raw(")\n");
    return 0;
}

int run_rename(const SessionsOptions& o) {
    auto db = open_for_reading(o, DbUse::write, "nothing was renamed");
    sessions::SessionStore store(*db);
    const auto info = find_or_throw(store, o);
    store.rename(info.id, o.title);
    ui::TextWriter(stdout)
        .raw("renamed ")
        .text(info.public_id)
        .raw(" to '")
        .text(o.title)
        .raw("'\n");
    return 0;
}

std::string mib(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1 << 20));
    return text;
}

uint64_t file_bytes(const std::string& path) {
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    return ec ? 0 : bytes;
}

int run_stats(const SessionsOptions& o) {
    const uint64_t cap = parse_byte_size(o.state_cap);
    auto db = open_for_reading(o);
    const std::string path = db_path(o);
    int64_t conversations = 0, messages = 0, message_bytes = 0, free_bytes = 0;
    {
        // Messages: their text, thinking and token ids, as stored.
        auto s = db->prepare(
            "SELECT (SELECT COUNT(*) FROM conversations), (SELECT COUNT(*) FROM messages), "
            "(SELECT COALESCE(SUM(LENGTH(CAST(content AS BLOB)) + LENGTH(CAST(thinking AS BLOB)) "
            "+ COALESCE(LENGTH(token_ids), 0)), 0) FROM messages)");
        s.step();
        conversations = s.column_int(0);
        messages = s.column_int(1);
        message_bytes = s.column_int(2);
        auto f = db->prepare(
            "SELECT (SELECT freelist_count FROM pragma_freelist_count) * "
            "(SELECT page_size FROM pragma_page_size)");
        f.step();
        free_bytes = f.column_int(0);
    }
    const sessions::StateStats state = sessions::read_state_stats(*db);
    std::error_code ec;
    const auto file_bytes = fs::exists(path, ec) ? fs::file_size(path, ec) : 0;
    const auto wal_bytes = fs::exists(path + "-wal", ec) ? fs::file_size(path + "-wal", ec) : 0;
    ui::TextWriter out(stdout);
    out.raw("database: ").text(path);
    std::printf(" (%.1f MiB, write-ahead log %.1f MiB)\n",
                static_cast<double>(file_bytes) / (1 << 20),
                static_cast<double>(wal_bytes) / (1 << 20));
    std::printf("conversations: %lld, messages: %lld\n", static_cast<long long>(conversations),
                static_cast<long long>(messages));
    std::printf("messages: %lld bytes (%s: text, thinking, token ids)\n",
                static_cast<long long>(message_bytes),
                mib(static_cast<double>(message_bytes)).c_str());
    std::printf(
        "state:    %lld bytes (%s: KV blocks and snapshots, a cache; ember sessions prune "
        "--state trims it, messages stay)\n",
        static_cast<long long>(state.stored_bytes),
        mib(static_cast<double>(state.stored_bytes)).c_str());
    if (free_bytes > 0) {
        std::printf("free:     %lld bytes inside the file (reused by later writes)\n",
                    static_cast<long long>(free_bytes));
    }
    out.text(state_stats_text(state, cap));
    return 0;
}

// "30m", "12h", "7d", "2w" (a bare number: days) as seconds; throws naming the option.
int64_t duration_seconds(const std::string& text) {
    size_t used = 0;
    double value = -1;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    const std::string unit = text.substr(used);
    const double scale = unit.empty() || unit == "d" ? 86400.0
                         : unit == "h"               ? 3600.0
                         : unit == "m"               ? 60.0
                         : unit == "w"               ? 7 * 86400.0
                                                     : 0.0;
    if (used == 0 || scale == 0 || !(value >= 0) || value * scale > 1e11) {
        throw CLI::ValidationError("--older-than", "'" + text +
                                                       "' is not a duration (a number with m, h, "
                                                       "d or w, e.g. 7d)");
    }
    return static_cast<int64_t>(value * scale);
}

std::string utc_seconds_ago(int64_t seconds) {
    return format_utc(std::chrono::system_clock::now() - std::chrono::seconds(seconds),
                      UtcFormat::Iso8601Seconds);
}

int run_prune(const SessionsOptions& o) {
    if (!o.prune_state) {
        throw CLI::ValidationError("prune", "say what to prune: --state (the stored KV state)");
    }
    std::optional<std::string> since;
    if (!o.older_than.empty()) since = utc_seconds_ago(duration_seconds(o.older_than));
    const std::string path = db_path(o);
    check_db_path(path);
    std::error_code ec;
    if (path == ":memory:" || !fs::exists(path, ec)) {
        throw std::runtime_error("no session database at " + path);
    }
    auto db = open_session_db(path, DbUse::write, "nothing was pruned");
    const uint64_t before = file_bytes(path) + file_bytes(path + "-wal");
    // Deleting gigabytes of state and rewriting the file (VACUUM) takes a while: a terminal
    // sees how long, and Ctrl-C, SIGTERM or SIGHUP interrupt the statement running (its
    // transaction rolls back: nothing half done).
    const StopSignals stop;
    ui::ElapsedLine elapsed(stderr);
    std::string doing = "deleting the state blocks";
    db->set_progress_check([&] {
        elapsed.show("sessions prune: " + doing);
        return stop.raised() == 0;
    });
    const auto stopped = [&](const std::string& what) {
        elapsed.clear();
        std::printf("stopped by SIG%s: %s\n", sigabbrev_np(stop.raised()), what.c_str());
        return 128 + stop.raised();
    };
    sessions::PruneResult pruned;
    try {
        pruned = sessions::prune_state(*db, since);
    } catch (const std::exception&) {
        if (stop.raised() != 0) return stopped("nothing was pruned");
        throw;
    }
    elapsed.clear();
    ui::TextWriter out(stdout);
    std::printf("pruned %lld state blocks (%s stored)%s; messages untouched\n",
                static_cast<long long>(pruned.blocks),
                mib(static_cast<double>(pruned.stored_bytes)).c_str(),
                since ? (" not used since " + *since).c_str() : "");
    // The freed pages go back to the file system only when the file is rewritten.
    doing = "rewriting the file (VACUUM)";
    try {
        db->exec_retrying_busy("VACUUM");
        db->exec_retrying_busy("PRAGMA wal_checkpoint(TRUNCATE)");
    } catch (const std::exception& e) {
        if (stop.raised() != 0) {
            return stopped(
                "the file keeps its size for now (VACUUM rolled back); prune again "
                "shrinks it");
        }
        elapsed.clear();
        out.raw("the file keeps its size for now (VACUUM: ")
            .text(e.what())
            .raw(
                "); later state reuses the space, and prune run again while no chat is open "
                "shrinks it\n");
        return 0;
    }
    elapsed.clear();
    const uint64_t after = file_bytes(path) + file_bytes(path + "-wal");
    std::printf("file: %s -> %s (VACUUM)\n", mib(static_cast<double>(before)).c_str(),
                mib(static_cast<double>(after)).c_str());
    return 0;
}

void print_problems(const std::vector<sessions::IntegrityProblem>& problems) {
    ui::TextWriter out(stdout);
    for (const auto& p : problems) {
        out.raw("conversation ").text(p.public_id).raw(": ").text(p.detail).raw("\n");
    }
}

size_t conversations_in(const std::vector<sessions::IntegrityProblem>& problems) {
    std::vector<int64_t> ids;
    for (const auto& p : problems) ids.push_back(p.conversation);
    std::sort(ids.begin(), ids.end());
    return static_cast<size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
}

int run_check(const SessionsOptions& o) {
    std::optional<sessions::VocabularyCheck> vocabulary;
    if (!o.model.empty()) {
        const auto model = load_model(model_path_for(o.model));
        vocabulary = sessions::VocabularyCheck{
            model->fingerprint(),
            std::min<int64_t>(model->config().n_vocab,
                              static_cast<int64_t>(model->tokenizer().vocab_size()))};
    }
    const sessions::VocabularyCheck* vocab = vocabulary ? &*vocabulary : nullptr;
    auto db = o.repair ? open_for_reading(o, DbUse::write,
                                          "ember sessions check without --repair reads it")
                       : open_for_reading(o);
    auto problems = sessions::check_integrity(*db, vocab);
    ui::TextWriter out(stdout);
    if (problems.empty()) {
        out.raw("no problems found in ").text(db_path(o)).raw("\n");
        return 0;
    }
    print_problems(problems);
    std::printf("%zu problem%s in %zu conversation%s\n", problems.size(),
                problems.size() == 1 ? "" : "s", conversations_in(problems),
                conversations_in(problems) == 1 ? "" : "s");
    if (!o.repair) {
        std::printf("ember sessions check --repair fixes them (after backing the file up)\n");
        return 1;
    }
    const std::string backup = sessions::backup_database(*db);
    out.raw("backup of the damaged database: ").text(backup).raw("\n");
    sessions::repair_integrity(*db, problems);
    // Checked again: a repair that left something (or found more) says so and fails.
    problems = sessions::check_integrity(*db, vocab);
    if (!problems.empty()) {
        print_problems(problems);
        throw std::runtime_error("the repair left " + std::to_string(problems.size()) +
                                 " problem(s) in " + db_path(o));
    }
    out.raw("repaired; no problems left in ").text(db_path(o)).raw("\n");
    return 0;
}

}  // namespace

void register_sessions_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<SessionsOptions>();
    auto* cmd = app.add_subcommand("sessions", "Saved conversations and the state store");
    cmd->require_subcommand(1);
    cmd->fallthrough();
    cmd->add_option("--db", o->db, "Session database (default: $XDG_DATA_HOME/ember/ember.db)")
        ->check(file_path());

    auto* list = cmd->add_subcommand("list", "Saved conversations, most recent first");
    list->add_option("-n,--limit", o->limit, "At most this many")->capture_default_str();
    out.push_back({list, [o] { return run_list(*o); }});

    auto* show = cmd->add_subcommand("show", "A conversation's current branch");
    show->add_option("id", o->id, "Conversation id (a unique prefix will do)")->required();
    out.push_back({show, [o] { return run_show(*o); }});

    auto* search = cmd->add_subcommand("search", "Messages containing all the words");
    search->add_option("text", o->text, "Words to find")->required();
    search->add_option("-n,--limit", o->limit, "At most this many")->capture_default_str();
    out.push_back({search, [o] { return run_search(*o); }});

    auto* exp = cmd->add_subcommand("export", "Write a conversation as Markdown or JSON");
    exp->add_option("id", o->id, "Conversation id")->required();
    exp->add_option("--format", o->format, "md (current branch) or json (every branch)")
        ->capture_default_str()
        ->check(CLI::IsMember({"md", "json"}));
    exp->add_option("-o,--output", o->output, "File to write (default: stdout)");
    out.push_back({exp, [o] { return run_export(*o); }});

    auto* rm = cmd->add_subcommand("rm", "Delete a conversation and its messages");
    rm->add_option("id", o->id, "Conversation id")->required();
    out.push_back({rm, [o] { return run_remove(*o); }});

    auto* rename = cmd->add_subcommand("rename", "Give a conversation a title");
    rename->add_option("id", o->id, "Conversation id")->required();
    rename->add_option("title", o->title, "New title")->required();
    out.push_back({rename, [o] { return run_rename(*o); }});

    auto* check = cmd->add_subcommand(
        "check",
        "Look for damaged conversations: parent chains that loop, missing parents or current "
        "messages, bad token ids. Exits 1 when it finds any");
    check->add_flag("--repair", o->repair,
                    "Fix them, after copying the database file to <db>.backup-<UTC time> next "
                    "to it: a message with a looping or missing parent becomes a root (nothing "
                    "is deleted; in a loop, its oldest message), a lost current message is set "
                    "to the newest one, bad token ids are cleared (the reply is tokenized from "
                    "its text). Exits 0 when nothing is left to fix");
    check->add_option("-m,--model", o->model,
                      "Also hold the reply ids of conversations recorded with this model to its "
                      "vocabulary (without it, only ids no vocabulary has are reported)");
    out.push_back({check, [o] { return run_check(*o); }});

    auto* stats = cmd->add_subcommand("stats", "Sizes, restore hit rates and evictions");
    stats->add_option("--state-cap", o->state_cap, "Cap to report against")
        ->capture_default_str()
        ->check(positive_byte_size());
    out.push_back({stats, [o] { return run_stats(*o); }});

    auto* prune = cmd->add_subcommand(
        "prune",
        "Delete stored state to free space (never messages; conversations resume cold), then "
        "VACUUM the file");
    prune->add_flag("--state", o->prune_state, "The KV state blocks and snapshots");
    prune->add_option("--older-than", o->older_than,
                      "Only state not used for this long: 30m, 12h, 7d (a number alone: days), 2w");
    out.push_back({prune, [o] { return run_prune(*o); }});
}

}  // namespace ember::app
