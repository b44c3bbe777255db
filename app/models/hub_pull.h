// `ember pull OWNER/REPO[:QUANT|FILE]`: a GGUF model from a Hugging Face-style hub, installed
// in Ember's models directory (model_locator.h's ModelDirs::ember, under hf/OWNER/REPO/) where
// `ember models` and `-m NAME` find it.
//
// The hub's public file API: GET {endpoint}/api/models/OWNER/REPO/tree/main?recursive=true
// lists the files (path, size, and for large files lfs.oid, their SHA-256), paged through a
// Link: <...>; rel="next" header; {endpoint}/OWNER/REPO/resolve/main/PATH downloads a file
// (usually a redirect to a CDN). The endpoint is $HF_ENDPOINT (default https://huggingface.co);
// $HF_TOKEN is sent as a bearer token for private and gated repositories.
//
// A download goes to FILE.part next to its destination and resumes from there after a cut (in
// the same run, up to --retries times, or in the next run). The SHA-256 the hub publishes is
// checked before the file is installed: a mismatch deletes the download and says so, and a file
// the hub publishes no SHA-256 for is refused. A split model (NAME-00001-of-0000N.gguf ...) is
// fetched part by part, each part checked, then joined into one NAME.gguf (the loader reads one
// file), and the parts are deleted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember::app::hub {

// What the user named: OWNER/REPO, and a quantization ("Q4_K_M") or a file path ("x.gguf").
struct ModelSpec {
    std::string owner;
    std::string repo;
    std::string quant;         // empty when a file or nothing was named
    std::string file;          // a path inside the repository ending in .gguf, or empty
    std::string text() const;  // as the user would type it
};

// Parses OWNER/REPO[:QUANT|FILE]. Throws HubError naming the bound that was hit (a name with
// "..", characters a hub name cannot hold, a name too long).
ModelSpec parse_spec(const std::string& text);

// True when `text` has the shape of OWNER/REPO[:...] (a hub name rather than a file path):
// one slash, hub-name characters, no ".gguf" ending without a ':'.
bool looks_like_spec(const std::string& text);

// One file of the repository as the listing gives it.
struct RepoFile {
    std::string path;
    uint64_t size = 0;
    std::string sha256;  // lfs.oid; empty when the hub publishes none
};

// The file(s) one model is made of: one file, or the parts of a split model in order.
struct ModelFiles {
    std::string name;  // the installed file's name: "Qwen3-8B-Q4_K_M.gguf"
    std::vector<RepoFile> parts;
    uint64_t total_bytes() const;
};

// The model `spec` names among `listing` (what select_model picks): a named file (a part of a
// split model names the whole set), the files matching a quantization, or with neither, the
// Q4_K_M one, else the only model there is. Throws HubError listing what the repository holds
// when nothing or more than one model matches.
ModelFiles select_model(const ModelSpec& spec, const std::vector<RepoFile>& listing);

struct PullOptions {
    int retries = 3;            // resumes within one run after a cut
    bool show_progress = true;  // a progress bar on stderr when it is a terminal
};

// Lists the repository, downloads, checks, joins and installs; returns the installed path.
// A model already installed is not fetched again. Throws HubError (or GgufError for a split
// set that does not join) with one line naming the file and the problem.
std::string pull(const ModelSpec& spec, const PullOptions& options);

// The installed file for `spec` under Ember's models directory, if it was pulled before.
std::optional<std::string> find_pulled(const ModelSpec& spec);

// $HF_ENDPOINT or https://huggingface.co, without a trailing slash.
std::string hub_endpoint();

}  // namespace ember::app::hub
