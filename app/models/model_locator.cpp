#include "app/models/model_locator.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "app/cli/did_you_mean.h"
#include "app/models/hub_http.h"
#include "app/models/hub_pull.h"
#include "engine/util/bounded_json.h"
#include "engine/util/xdg_paths.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The config file and ollama's manifests are a few KiB; whoever can write there is not
// trusted to make Ember read or build more.
constexpr JsonLimits kSmallFileLimits{size_t{1} << 20, kMaxJsonDepth};

// GGUF files start with these four bytes; ollama's blobs have no extension, so the magic is
// what tells a model apart from its other layers (template, license, params).
bool has_gguf_magic(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

void add_found(std::vector<FoundModel>& out, const fs::path& path, std::string name,
               const std::string& source) {
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    if (ec) return;
    const auto modified = fs::last_write_time(path, ec);
    if (ec || !has_gguf_magic(path)) return;
    out.push_back({std::move(name), path.string(), source, bytes, modified});
}

// Every *.gguf below `root` (following the tool's own nesting, e.g. LM Studio's
// publisher/model/file.gguf).
void scan_gguf_tree(std::vector<FoundModel>& out, const std::string& root,
                    const std::string& source) {
    std::error_code ec;
    if (root.empty() || !fs::is_directory(root, ec)) return;
    auto it =
        fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it.depth() > 4) it.disable_recursion_pending();
        const fs::path& p = it->path();
        if (p.extension() != ".gguf" || !it->is_regular_file(ec)) continue;
        // Split models (name-00001-of-00003.gguf) are listed by their first part only.
        const std::string stem = p.stem().string();
        if (stem.find("-of-") != std::string::npos && stem.find("-00001-of-") == std::string::npos)
            continue;
        add_found(out, p, stem, source);
    }
}

// ollama keeps manifests/<registry>/<namespace>/<model>/<tag> (JSON listing layers by digest)
// and blobs/sha256-<hex>; the model layer has mediaType application/vnd.ollama.image.model.
void scan_ollama(std::vector<FoundModel>& out, const std::string& root) {
    std::error_code ec;
    const fs::path manifests = fs::path(root) / "manifests";
    if (root.empty() || !fs::is_directory(manifests, ec)) return;
    auto it = fs::recursive_directory_iterator(manifests,
                                               fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        std::ifstream in(it->path());
        const json manifest =
            try_parse_json_bounded<json>(read_json_text(in, kSmallFileLimits), kSmallFileLimits);
        if (!manifest.is_object() || !manifest.contains("layers")) continue;
        for (const auto& layer : manifest["layers"]) {
            if (!layer.is_object() ||
                layer.value("mediaType", "") != "application/vnd.ollama.image.model") {
                continue;
            }
            std::string digest = layer.value("digest", "");
            std::replace(digest.begin(), digest.end(), ':', '-');
            const fs::path tag = it->path();
            const std::string name =
                tag.parent_path().filename().string() + ":" + tag.filename().string();
            add_found(out, fs::path(root) / "blobs" / digest, name, "ollama");
        }
    }
}

std::string env_or(const char* name, const std::string& fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0' ? std::string(value) : fallback;
}

std::string join_dir(const std::string& base, const char* rest) {
    return base.empty() ? std::string() : base + "/" + rest;
}

// OWNER/REPO[:QUANT|FILE] named as a model: the file pulled before, or pulled now once the
// user says yes on a terminal. Without a terminal nothing is downloaded unasked.
std::string pulled_or_pull(const std::string& requested, const char* origin, bool may_ask) {
    const hub::ModelSpec spec = hub::parse_spec(requested);
    if (auto path = hub::find_pulled(spec)) return *path;
    const std::string where = hub::hub_endpoint();
    if (!may_ask) {
        throw std::runtime_error(std::string(origin) + " '" + requested + "': not pulled from " +
                                 where + " yet; run `ember pull " + requested +
                                 "` in a shell first");
    }
    if (!ui::is_terminal(stdin) || !ui::is_terminal(stderr)) {
        throw std::runtime_error(std::string(origin) + " '" + requested +
                                 "': no such file, and not pulled from " + where +
                                 " yet; there is no terminal to ask on, so run `ember pull " +
                                 requested + "` first");
    }
    ui::TextWriter(stderr)
        .raw("ember: ")
        .text(requested)
        .raw(" is not on this machine. Download it from ")
        .text(where)
        .raw(" now? [y/N] ");
    std::fflush(stderr);
    char answer[64] = {};
    const bool yes = std::fgets(answer, sizeof answer, stdin) != nullptr &&
                     (std::strcmp(answer, "y\n") == 0 || std::strcmp(answer, "yes\n") == 0 ||
                      std::strcmp(answer, "Y\n") == 0);
    if (!yes) {
        throw std::runtime_error(std::string(origin) + " '" + requested +
                                 "': not downloaded (the answer was not yes)");
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    std::string path = hub::pull(spec, hub::PullOptions{});
    curl_global_cleanup();
    return path;
}

// A path that exists, or a name among the found models.
std::string path_or_name(const std::string& requested, const char* origin, bool may_ask = true) {
    // A NUL would cut the path where the file system reads it: another file than named.
    if (requested.find('\0') != std::string::npos) {
        throw std::runtime_error(std::string(origin) + ": the path holds a NUL byte");
    }
    if (requested.empty()) throw std::runtime_error(std::string(origin) + ": the path is empty");
    std::error_code ec;
    if (fs::exists(requested, ec)) {
        // Anything but a regular file is refused before it is opened (opening a FIFO waits
        // for a writer).
        const fs::file_type type = fs::status(requested, ec).type();
        const char* kind = type == fs::file_type::directory ? "a directory"
                           : type == fs::file_type::fifo    ? "a FIFO"
                           : type == fs::file_type::socket  ? "a socket"
                           : type == fs::file_type::block || type == fs::file_type::character
                               ? "a device"
                               : nullptr;
        if (kind != nullptr) {
            throw std::runtime_error(std::string(origin) + " '" + requested + "' is " + kind +
                                     ", not a GGUF file");
        }
        return requested;
    }
    if (hub::looks_like_spec(requested)) return pulled_or_pull(requested, origin, may_ask);
    const bool looks_like_path =
        requested.find('/') != std::string::npos || requested.ends_with(".gguf");
    const auto found = find_models(model_dirs());
    if (!looks_like_path) {
        for (const auto& m : found) {
            if (m.name == requested) return m.path;
        }
        // A unique prefix of a name is enough ("qwen3" for "qwen3:0.6b").
        const FoundModel* match = nullptr;
        int matches = 0;
        for (const auto& m : found) {
            if (m.name.starts_with(requested)) {
                match = &m;
                ++matches;
            }
        }
        if (matches == 1) return match->path;
    }
    std::string msg = std::string(origin) + " '" + requested + "': no such file";
    if (!looks_like_path) {
        std::vector<std::string> names;
        for (const auto& m : found) names.push_back(m.name);
        if (const std::string near = nearest_name(requested, names); !near.empty()) {
            throw std::runtime_error(msg + "; did you mean '" + near + "'? (see `ember models`)");
        }
        msg += found.empty() ? " and no models were found by name (see `ember models`)"
                             : ", and it names no single found model; found:";
        for (const auto& m : found) msg += " " + m.name;
    }
    throw std::runtime_error(msg);
}

float number_at(const json& sampling, const char* key) {
    const json& v = sampling[key];
    if (!v.is_number()) {
        throw std::runtime_error(config_path() + ": sampling." + key + " must be a number");
    }
    return v.get<float>();
}

}  // namespace

std::string where_to_put_models(const ModelDirs& dirs) {
    std::ostringstream s;
    s << "no model given and none found. Pass -m FILE.gguf, set EMBER_MODEL, put "
         "{\"model\": \"/path/to/model.gguf\"} in "
      << config_path() << ", or copy a GGUF file into " << dirs.ember
      << " (also searched: llama.cpp's cache " << dirs.llama_cpp << ", ollama's store "
      << dirs.ollama << ", LM Studio's models dir)";
    return s.str();
}

ModelDirs model_dirs() {
    ModelDirs d;
    d.ember = join_dir(xdg_data_home(), "ember/models");
    d.llama_cpp = env_or("LLAMA_CACHE", join_dir(xdg_cache_home(), "llama.cpp"));
    d.ollama = env_or("OLLAMA_MODELS", join_dir(home_dir(), ".ollama/models"));
    d.lm_studio = {join_dir(home_dir(), ".lmstudio/models"),
                   join_dir(home_dir(), ".cache/lm-studio/models")};
    return d;
}

std::vector<FoundModel> find_models(const ModelDirs& dirs) {
    std::vector<FoundModel> out;
    scan_gguf_tree(out, dirs.ember, "ember");
    scan_gguf_tree(out, dirs.llama_cpp, "llama.cpp");
    scan_ollama(out, dirs.ollama);
    for (const auto& dir : dirs.lm_studio) scan_gguf_tree(out, dir, "lm-studio");
    std::stable_sort(out.begin(), out.end(), [](const FoundModel& a, const FoundModel& b) {
        return a.modified > b.modified;
    });
    return out;
}

std::string config_path() {
    const std::string base = xdg_config_home();
    return base.empty() ? std::string("ember/config.json") : base + "/ember/config.json";
}

json load_config() {
    const std::string path = config_path();
    std::ifstream in(path);
    if (!in) return json::object();
    try {
        // The error names the file (below).
        json config = parse_json_bounded<json>(read_json_text(in, kSmallFileLimits),
                                               kSmallFileLimits, "", InvalidJson::Throw);
        if (!config.is_object()) throw std::runtime_error("the top level must be an object");
        return config;
    } catch (const std::exception& e) {
        throw std::runtime_error("config file " + path + ": " + e.what());
    }
}

std::string resolve_model(const std::string& requested, std::string* note, bool may_ask_to_pull) {
    if (!requested.empty()) return path_or_name(requested, "model", may_ask_to_pull);
    if (const char* env = std::getenv("EMBER_MODEL"); env != nullptr && env[0] != '\0') {
        return path_or_name(env, "EMBER_MODEL");
    }
    const json config = load_config();
    if (config.contains("model")) {
        if (!config["model"].is_string()) {
            throw std::runtime_error(config_path() + ": \"model\" must be a string");
        }
        return path_or_name(config["model"].get<std::string>(), "the config's model");
    }
    const ModelDirs dirs = model_dirs();
    const auto found = find_models(dirs);
    if (found.empty()) throw std::runtime_error(where_to_put_models(dirs));
    if (note != nullptr) {
        *note = "using " + found.front().name + " (" + found.front().path + ", " +
                found.front().source +
                "); choose another with -m or EMBER_MODEL (see `ember models`)";
    }
    return found.front().path;
}

std::string model_path_for(const std::string& requested) {
    std::string note;
    std::string path = resolve_model(requested, &note);
    if (!note.empty()) ui::TextWriter(stderr).raw("ember: ").text(note).raw("\n");
    return path;
}

void apply_config_sampling(const json& config, const CLI::App& cmd, SamplingParams& params) {
    if (!config.contains("sampling")) return;
    const json& s = config["sampling"];
    if (!s.is_object())
        throw std::runtime_error(config_path() + ": \"sampling\" must be an object");
    const auto given = [&](const char* option) { return cmd.count(option) > 0; };
    if (s.contains("temp") && !given("--temp")) params.temperature = number_at(s, "temp");
    if (s.contains("top_k") && !given("--top-k")) {
        params.top_k = static_cast<int32_t>(number_at(s, "top_k"));
    }
    if (s.contains("top_p") && !given("--top-p")) params.top_p = number_at(s, "top_p");
    if (s.contains("min_p") && !given("--min-p")) params.min_p = number_at(s, "min_p");
    if (s.contains("repeat_penalty") && !given("--repeat-penalty")) {
        params.repeat_penalty = number_at(s, "repeat_penalty");
    }
    if (s.contains("seed") && !given("--seed")) {
        if (!s["seed"].is_number_unsigned()) {
            throw std::runtime_error(config_path() + ": sampling.seed must be a whole number >= 0");
        }
        params.seed = s["seed"].get<uint64_t>();
    }
    for (const auto& [key, value] : s.items()) {
        static constexpr const char* kKnown[] = {"temp",  "top_k",          "top_p",
                                                 "min_p", "repeat_penalty", "seed"};
        if (std::find_if(std::begin(kKnown), std::end(kKnown),
                         [&](const char* k) { return key == k; }) == std::end(kKnown)) {
            throw std::runtime_error(config_path() + ": unknown sampling setting \"" + key +
                                     "\" (known: temp, top_k, top_p, min_p, repeat_penalty, seed)");
        }
    }
}

}  // namespace ember::app
