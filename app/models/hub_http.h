// HTTP for `ember pull` (app/models/hub_pull.h), through libcurl: small JSON documents from a model
// hub's API, and resumable downloads of large files into a `.part` file. Only http and https,
// at most 5 redirects; a token is sent to the hub's own host only (libcurl drops a custom
// Authorization header on a redirect to another host or port, so a CDN never sees it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace ember::app::hub {

// A failure that names what was asked and why (HTTP status, refused connection, cut transfer).
class HubError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What a download call got: `complete` when the .part file now holds `expected_bytes`;
// otherwise `error` says why it stopped (a cut connection is worth resuming; `fatal` is not:
// an HTTP error, more bytes than announced).
struct DownloadOutcome {
    bool complete = false;
    bool fatal = false;
    std::string error;
};

// Called often while bytes arrive: (bytes in the .part file so far, bytes expected).
using ProgressFn = std::function<void(uint64_t have, uint64_t total)>;

class HttpClient {
public:
    // `token`: sent as "Authorization: Bearer" when non-empty.
    explicit HttpClient(std::string token);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // GET `url` and return the body of a 200 reply. Throws HubError naming the URL and the
    // status or transport error, and when the body passes `max_bytes`. `next_url` (optional)
    // receives the Link header's rel="next" target (paged listings), or empty.
    std::string get_text(const std::string& url, uint64_t max_bytes,
                         std::string* next_url = nullptr);

    // Downloads `url` into `part`, which may hold the first bytes already: those are kept and
    // the rest asked for with a Range request (a server that ignores it starts the file over).
    // Stops, with `fatal`, when the server sends more than `expected_bytes`.
    DownloadOutcome download(const std::string& url, const std::filesystem::path& part,
                             uint64_t expected_bytes, const ProgressFn& progress);

    // Each path segment of `path` percent-encoded, the slashes kept.
    std::string escape_path(const std::string& path) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The lowercase hex SHA-256 of a file's bytes. Throws naming the file when it cannot be read.
std::string sha256_of_file(const std::filesystem::path& file);

}  // namespace ember::app::hub
