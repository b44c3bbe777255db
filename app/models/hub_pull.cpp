#include "app/models/hub_pull.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "app/models/hub_http.h"
#include "app/models/hub_join.h"
#include "app/models/model_locator.h"
#include "engine/util/bounded_json.h"
#include "ui/io/terminal_text.h"

namespace ember::app::hub {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Bounds on what a hub may send and a user may name; each error says which one was hit.
constexpr size_t kMaxNameLength = 96;  // OWNER and REPO each, as the hub allows
constexpr size_t kMaxQuantLength = 64;
constexpr size_t kMaxPathLength = 1024;             // a file path inside a repository
constexpr uint64_t kMaxListingBytes = 16ull << 20;  // one page of the file listing
constexpr int kMaxListingPages = 100;
constexpr size_t kMaxListedFiles = 100000;
constexpr uint64_t kMaxFileBytes = 1ull << 40;  // 1 TiB: far past any model file there is
constexpr int kMaxSplitParts = 256;
constexpr int kListingJsonDepth = 8;

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

bool hub_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

void check_name(const std::string& what, const std::string& name, const std::string& spec) {
    if (name.empty()) throw HubError("'" + spec + "': the " + what + " is empty (OWNER/REPO)");
    if (name.size() > kMaxNameLength) {
        throw HubError("'" + spec + "': the " + what + " is longer than " +
                       std::to_string(kMaxNameLength) + " characters");
    }
    if (name.find("..") != std::string::npos) {
        throw HubError("'" + spec + "': the " + what + " holds '..'");
    }
    if (!std::all_of(name.begin(), name.end(), hub_name_char) || name.front() == '.' ||
        name.front() == '-') {
        throw HubError("'" + spec + "': the " + what +
                       " may hold only letters, digits, '-', '_' and '.' (not first)");
    }
}

// A path inside a repository, as named by the user or listed by the hub: relative, no ".."
// segment, no control character or backslash, bounded.
std::string path_problem(const std::string& path) {
    if (path.empty()) return "is empty";
    if (path.size() > kMaxPathLength) {
        return "is longer than " + std::to_string(kMaxPathLength) + " characters";
    }
    if (path.front() == '/') return "is absolute";
    for (char c : path) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') {
            return "holds a control character or a backslash";
        }
    }
    size_t at = 0;
    while (at <= path.size()) {
        size_t slash = path.find('/', at);
        if (slash == std::string::npos) slash = path.size();
        const std::string segment = path.substr(at, slash - at);
        if (segment == "..") return "holds '..'";
        if (segment.empty() || segment == ".") return "has an empty or '.' segment";
        at = slash + 1;
    }
    return {};
}

bool is_gguf(const std::string& path) {
    return upper(path).ends_with(".GGUF");
}

std::string base_name(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// QUANT appears in `path` on its own: not inside a longer word (Q4_K is not Q4_K_M, Q4_XS is
// not IQ4_XS).
bool matches_quant(const std::string& path, const std::string& quant) {
    const std::string haystack = upper(path), needle = upper(quant);
    const auto word = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
    };
    for (size_t at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + 1)) {
        const bool starts = at == 0 || !word(haystack[at - 1]);
        const size_t end = at + needle.size();
        const bool ends = end == haystack.size() || !word(haystack[end]);
        if (starts && ends) return true;
    }
    return false;
}

struct SplitName {
    std::string prefix;  // the path before "-00001-of-00003.gguf"
    int index = 0;
    int count = 0;
};

std::optional<SplitName> split_name(const std::string& path) {
    static const std::regex kSplit(R"(^(.+)-(\d{5})-of-(\d{5})\.gguf$)", std::regex::icase);
    std::smatch m;
    if (!std::regex_match(path, m, kSplit)) return std::nullopt;
    return SplitName{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
}

// The repository's GGUF files grouped into models (a split set is one model), keyed by the
// path that names them (a single file's path, a split set's prefix).
std::map<std::string, ModelFiles> group_models(const std::vector<RepoFile>& listing) {
    std::map<std::string, ModelFiles> models;
    std::set<std::string> split_prefixes;
    for (const auto& file : listing) {
        if (!is_gguf(file.path)) continue;
        if (const auto split = split_name(file.path)) {
            ModelFiles& m = models[split->prefix];
            m.name = base_name(split->prefix) + ".gguf";
            m.parts.push_back(file);
            split_prefixes.insert(split->prefix);
        } else {
            models[file.path] = ModelFiles{base_name(file.path), {file}};
        }
    }
    // The parts in order: the zero-padded numbers sort as text.
    for (const auto& prefix : split_prefixes) {
        ModelFiles& m = models[prefix];
        std::sort(m.parts.begin(), m.parts.end(),
                  [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
    }
    return models;
}

// A split set must list every part once, of one count, within the bound.
void check_split_set(const ModelFiles& model) {
    if (model.parts.size() == 1 && !split_name(model.parts[0].path)) return;
    const int count = split_name(model.parts[0].path)->count;
    if (count < 1 || count > kMaxSplitParts) {
        throw HubError(model.name + ": a split of " + std::to_string(count) +
                       " parts (the bound is " + std::to_string(kMaxSplitParts) + ")");
    }
    for (size_t i = 0; i < model.parts.size(); ++i) {
        const auto split = split_name(model.parts[i].path);
        if (split->count != count || split->index != static_cast<int>(i) + 1) {
            throw HubError(model.name + ": the hub lists " + std::to_string(model.parts.size()) +
                           " of its " + std::to_string(count) + " parts; part " +
                           std::to_string(i + 1) + " is missing or listed twice");
        }
    }
    if (static_cast<int>(model.parts.size()) != count) {
        throw HubError(model.name + ": the hub lists " + std::to_string(model.parts.size()) +
                       " of its " + std::to_string(count) + " parts");
    }
}

std::string names_of(const std::vector<const ModelFiles*>& models) {
    std::string s;
    for (const auto* m : models) s += (s.empty() ? "" : ", ") + m->name;
    return s;
}

}  // namespace

std::string ModelSpec::text() const {
    std::string s = owner + "/" + repo;
    if (!quant.empty()) s += ":" + quant;
    if (!file.empty()) s += ":" + file;
    return s;
}

uint64_t ModelFiles::total_bytes() const {
    uint64_t total = 0;
    for (const auto& p : parts) total += p.size;
    return total;
}

bool looks_like_spec(const std::string& text) {
    const size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
    if (colon == std::string::npos && is_gguf(text)) return false;
    // "./model" and "../x" are paths: a hub name's parts start with a letter or a digit.
    const auto starts_well = [](const std::string& part) {
        return !part.empty() && std::isalnum(static_cast<unsigned char>(part.front())) != 0;
    };
    return starts_well(name.substr(0, slash)) && starts_well(name.substr(slash + 1)) &&
           std::all_of(name.begin(), name.end(),
                       [](char c) { return c == '/' || hub_name_char(c); });
}

ModelSpec parse_spec(const std::string& text) {
    const size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) {
        throw HubError("'" + text + "': name a model as OWNER/REPO[:QUANT|FILE]");
    }
    ModelSpec spec;
    spec.owner = name.substr(0, slash);
    spec.repo = name.substr(slash + 1);
    check_name("owner", spec.owner, text);
    check_name("repository name", spec.repo, text);
    if (colon == std::string::npos) return spec;
    const std::string selector = text.substr(colon + 1);
    if (is_gguf(selector) || selector.find('/') != std::string::npos) {
        if (const std::string problem = path_problem(selector); !problem.empty()) {
            throw HubError("'" + text + "': the file name " + problem);
        }
        spec.file = selector;
        return spec;
    }
    if (selector.empty()) throw HubError("'" + text + "': nothing after ':' (a QUANT or FILE)");
    if (selector.size() > kMaxQuantLength) {
        throw HubError("'" + text + "': the quantization is longer than " +
                       std::to_string(kMaxQuantLength) + " characters");
    }
    if (selector.find("..") != std::string::npos ||
        !std::all_of(selector.begin(), selector.end(), hub_name_char)) {
        throw HubError("'" + text +
                       "': a quantization (after ':') may hold only letters, digits, "
                       "'-', '_' and '.', and no '..'");
    }
    spec.quant = selector;
    return spec;
}

ModelFiles select_model(const ModelSpec& spec, const std::vector<RepoFile>& listing) {
    const auto models = group_models(listing);
    const std::string repo = spec.owner + "/" + spec.repo;
    std::vector<const ModelFiles*> all, picked;
    for (const auto& [key, m] : models) {
        if (upper(m.name).find("MMPROJ") == std::string::npos) all.push_back(&m);
    }
    if (models.empty()) throw HubError(repo + " holds no GGUF file");
    if (!spec.file.empty()) {
        for (const auto& [key, m] : models) {
            for (const auto& part : m.parts) {
                if (part.path == spec.file || base_name(part.path) == spec.file) {
                    picked.push_back(&m);
                    break;
                }
            }
        }
        if (picked.empty()) {
            throw HubError(repo + " has no file " + spec.file + "; its models: " + names_of(all));
        }
    } else if (!spec.quant.empty()) {
        for (const auto* m : all) {
            if (matches_quant(m->parts[0].path, spec.quant)) picked.push_back(m);
        }
        if (picked.empty()) {
            throw HubError("no model in " + repo + " matches '" + spec.quant +
                           "'; its models: " + names_of(all));
        }
    } else {
        picked = all;
        if (picked.size() > 1) {
            std::vector<const ModelFiles*> q4;
            for (const auto* m : all) {
                if (matches_quant(m->parts[0].path, "Q4_K_M")) q4.push_back(m);
            }
            if (q4.size() == 1) picked = q4;
        }
        if (picked.empty()) throw HubError(repo + " holds no GGUF model (only projectors)");
    }
    if (picked.size() > 1) {
        throw HubError("'" + spec.text() + "' matches " + std::to_string(picked.size()) +
                       " models in " + repo + ": " + names_of(picked) + "; name one as " + repo +
                       ":QUANT or " + repo + ":FILE");
    }
    check_split_set(*picked.front());
    return *picked.front();
}

std::string hub_endpoint() {
    const char* env = std::getenv("HF_ENDPOINT");
    std::string endpoint = env != nullptr && env[0] != '\0' ? env : "https://huggingface.co";
    while (endpoint.ends_with("/")) endpoint.pop_back();
    return endpoint;
}

namespace {

std::string hub_token() {
    const char* env = std::getenv("HF_TOKEN");
    return env != nullptr ? std::string(env) : std::string();
}

fs::path install_dir(const ModelSpec& spec) {
    const std::string models = model_dirs().ember;
    if (models.empty()) throw HubError("no models directory: HOME and XDG_DATA_HOME are unset");
    return fs::path(models) / "hf" / spec.owner / spec.repo;
}

// Every file of the repository, through the listing's pages.
std::vector<RepoFile> list_repo(HttpClient& http, const ModelSpec& spec) {
    const std::string repo = spec.owner + "/" + spec.repo;
    std::string url = hub_endpoint() + "/api/models/" + repo + "/tree/main?recursive=true";
    std::vector<RepoFile> files;
    for (int page = 0; !url.empty(); ++page) {
        if (page == kMaxListingPages) {
            throw HubError(repo + ": the listing has more than " +
                           std::to_string(kMaxListingPages) + " pages");
        }
        std::string next;
        const std::string listing = http.get_text(url, kMaxListingBytes, &next);
        json parsed;
        try {
            parsed = parse_json_bounded<json>(
                listing, {static_cast<size_t>(kMaxListingBytes), kListingJsonDepth}, url);
        } catch (const JsonLimitError& e) {
            throw HubError(e.what());
        }
        if (!parsed.is_array()) throw HubError(url + ": the listing is not a JSON array of files");
        for (const auto& entry : parsed) {
            if (!entry.is_object() || entry.value("type", "") != "file") continue;
            if (!entry.contains("path") || !entry["path"].is_string() || !entry.contains("size") ||
                !entry["size"].is_number_unsigned()) {
                throw HubError(url + ": a listed file lacks a path or a size");
            }
            RepoFile file{entry["path"].get<std::string>(), entry["size"].get<uint64_t>(), {}};
            if (!is_gguf(file.path)) continue;
            if (const std::string problem = path_problem(file.path); !problem.empty()) {
                throw HubError(repo + ": the hub lists a file whose path " + problem);
            }
            if (file.size > kMaxFileBytes) {
                throw HubError(repo + ": the hub lists " + file.path + " at " +
                               std::to_string(file.size) +
                               " bytes, past the 1 TiB bound on a "
                               "model file");
            }
            if (entry.contains("lfs") && entry["lfs"].is_object()) {
                const std::string oid = entry["lfs"].value("oid", "");
                if (oid.size() == 64 && std::all_of(oid.begin(), oid.end(), [](char c) {
                        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                    })) {
                    file.sha256 = oid;
                    for (char& c : file.sha256) c = static_cast<char>(std::tolower(c));
                }
            }
            files.push_back(std::move(file));
            if (files.size() > kMaxListedFiles) {
                throw HubError(repo + ": the listing has more than " +
                               std::to_string(kMaxListedFiles) + " GGUF files");
            }
        }
        // A next page on another host would carry the token away: only the hub's own.
        if (!next.empty() && !next.starts_with(hub_endpoint() + "/")) {
            throw HubError(url + ": the listing's next page is on another host: " + next);
        }
        url = next;
    }
    return files;
}

std::string mib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
}

// One line on a terminal, redrawn at most ten times a second: name, percent, a bar, bytes,
// rate and time left. Off a terminal: nothing (the start and end lines say enough).
class ProgressBar {
public:
    ProgressBar(std::string name, bool enabled) : name_(std::move(name)), enabled_(enabled) {
        if (name_.size() > 32) name_ = name_.substr(0, 29) + "...";
    }
    void start(uint64_t have) {
        start_have_ = have;
        started_ = std::chrono::steady_clock::now();
    }
    void draw(uint64_t have, uint64_t total, bool force = false) {
        if (!enabled_ || total == 0) return;
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        const double seconds = std::chrono::duration<double>(now - started_).count();
        const double rate = seconds > 0.2 ? static_cast<double>(have - start_have_) / seconds : 0;
        const int percent =
            static_cast<int>(100.0 * static_cast<double>(have) / static_cast<double>(total));
        constexpr int kWidth = 24;
        const int filled = percent * kWidth / 100;
        std::string bar(static_cast<size_t>(filled), '#');
        bar.append(static_cast<size_t>(kWidth - filled), '.');
        char eta[32] = "";
        if (rate > 0) {
            const auto left = static_cast<long>(static_cast<double>(total - have) / rate);
            std::snprintf(eta, sizeof eta, "  %ld:%02ld left", left / 60, left % 60);
        }
        ui::TextWriter(stderr).raw("\r").text(name_).raw(" ");
        std::fprintf(stderr, "%3d%% [%s] %s / %s  %.1f MiB/s%s\x1b[K", percent, bar.c_str(),
                     mib(have).c_str(), mib(total).c_str(), rate / (1 << 20), eta);
        std::fflush(stderr);
        drawn_ = true;
    }
    void end() {
        if (drawn_) std::fputc('\n', stderr);
        drawn_ = false;
    }

private:
    std::string name_;
    bool enabled_ = false;
    bool drawn_ = false;
    uint64_t start_have_ = 0;
    std::chrono::steady_clock::time_point started_{}, last_{};
};

void say(const std::string& line) {
    ui::TextWriter(stderr).raw("ember: ").text(line).raw("\n");
}

void check_free_space(const fs::path& dir, uint64_t needed) {
    struct statvfs fs_info {};
    if (statvfs(dir.c_str(), &fs_info) != 0) return;  // unknown: the writes will say
    const uint64_t free_bytes = static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
    if (needed > free_bytes) {
        throw HubError("not enough free space in " + dir.string() + ": the download needs " +
                       mib(needed) + ", " + mib(free_bytes) + " are free");
    }
}

uint64_t size_or_zero(const fs::path& path) {
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    return ec ? 0 : size;
}

// Downloads one file into `part` (resuming what it holds) and checks its SHA-256; on a
// mismatch the download is deleted.
void fetch_checked(HttpClient& http, const ModelSpec& spec, const RepoFile& file,
                   const fs::path& part, const PullOptions& options) {
    const std::string url = hub_endpoint() + "/" + spec.owner + "/" + spec.repo + "/resolve/main/" +
                            http.escape_path(file.path);
    const uint64_t had = size_or_zero(part);
    if (had > 0 && had < file.size) {
        say("resuming " + file.path + " at " + mib(had) + " of " + mib(file.size));
    } else if (had == 0) {
        say("downloading " + file.path + " (" + mib(file.size) + ") from " + hub_endpoint());
    }
    ProgressBar bar(base_name(file.path), options.show_progress && ui::is_terminal(stderr));
    for (int attempt = 0;; ++attempt) {
        bar.start(size_or_zero(part));
        const DownloadOutcome outcome = http.download(
            url, part, file.size, [&](uint64_t have, uint64_t total) { bar.draw(have, total); });
        bar.draw(size_or_zero(part), file.size, true);
        bar.end();
        if (outcome.complete) break;
        const uint64_t have = size_or_zero(part);
        if (outcome.fatal) throw HubError(file.path + ": " + outcome.error);
        if (attempt >= options.retries) {
            throw HubError(file.path + ": the download was cut at " + mib(have) + " of " +
                           mib(file.size) + " (" + outcome.error + ") after " +
                           std::to_string(attempt + 1) + " tries; " + part.string() +
                           " is kept: run the same command again to resume");
        }
        say(file.path + ": the download was cut at " + mib(have) + " (" + outcome.error +
            "); resuming (try " + std::to_string(attempt + 2) + " of " +
            std::to_string(options.retries + 1) + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(500 * (attempt + 1)));
    }
    const std::string got = sha256_of_file(part);
    if (got != file.sha256) {
        std::error_code ec;
        fs::remove(part, ec);
        throw HubError(file.path + ": its SHA-256 is " + got + ", the hub publishes " +
                       file.sha256 + "; the download was deleted (run again to fetch it anew)");
    }
    say(file.path + ": SHA-256 checked");
}

}  // namespace

std::string pull(const ModelSpec& spec, const PullOptions& options) {
    HttpClient http(hub_token());
    const ModelFiles model = select_model(spec, list_repo(http, spec));
    for (const auto& part : model.parts) {
        if (part.sha256.empty()) {
            throw HubError(part.path +
                           ": the hub publishes no SHA-256 for it, so it cannot be "
                           "checked; not downloaded");
        }
    }
    const fs::path dir = install_dir(spec);
    const fs::path dest = dir / model.name;
    std::error_code ec;
    if (fs::exists(dest, ec)) {
        say(spec.text() + " is already pulled");
        return dest.string();
    }
    fs::create_directories(dir, ec);
    if (ec) throw HubError("cannot create " + dir.string() + ": " + ec.message());
    const bool split = model.parts.size() > 1 || split_name(model.parts[0].path).has_value();
    uint64_t needed = split ? model.total_bytes() : 0;  // the joined copy
    for (const auto& part : model.parts) {
        const fs::path verified = dir / (base_name(part.path) + ".verified");
        const fs::path partial =
            split ? dir / (base_name(part.path) + ".part") : fs::path(dest.string() + ".part");
        if (size_or_zero(verified) != part.size)
            needed += part.size - std::min(part.size, size_or_zero(partial));
    }
    check_free_space(dir, needed);
    if (!split) {
        const fs::path partial = dest.string() + ".part";
        fetch_checked(http, spec, model.parts[0], partial, options);
        fs::rename(partial, dest);
        return dest.string();
    }
    std::vector<std::string> verified_parts;
    for (const auto& part : model.parts) {
        const fs::path verified = dir / (base_name(part.path) + ".verified");
        if (size_or_zero(verified) != part.size) {
            const fs::path partial = dir / (base_name(part.path) + ".part");
            fetch_checked(http, spec, part, partial, options);
            fs::rename(partial, verified);
        }
        verified_parts.push_back(verified.string());
    }
    say("joining " + std::to_string(model.parts.size()) + " parts into " + model.name);
    join_split_gguf(verified_parts, dest.string());
    for (const auto& p : verified_parts) fs::remove(p, ec);
    return dest.string();
}

std::optional<std::string> find_pulled(const ModelSpec& spec) {
    std::error_code ec;
    const fs::path dir = install_dir(spec);
    if (!fs::is_directory(dir, ec)) return std::nullopt;
    std::vector<RepoFile> local;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (is_gguf(name) && entry.is_regular_file(ec)) local.push_back({name, 0, {}});
    }
    ModelSpec by_name = spec;
    by_name.file = spec.file.empty() ? "" : base_name(spec.file);
    if (const auto split = split_name(by_name.file))
        by_name.file = base_name(split->prefix) + ".gguf";
    try {
        return (dir / select_model(by_name, local).name).string();
    } catch (const HubError&) {
        return std::nullopt;
    }
}

}  // namespace ember::app::hub
