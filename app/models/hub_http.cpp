#include "app/models/hub_http.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace ember::app::hub {

namespace fs = std::filesystem;

namespace {

// A stalled transfer (no byte for this long) counts as cut, so it is resumed, not waited on.
constexpr long kStallSeconds = 30;
constexpr long kConnectSeconds = 20;
constexpr long kMaxRedirects = 5;
// What an error reply's body may add to a message.
constexpr size_t kMaxErrorBody = 300;

struct CurlHandle {
    CURL* curl = curl_easy_init();
    curl_slist* headers = nullptr;
    ~CurlHandle() {
        curl_slist_free_all(headers);
        if (curl != nullptr) curl_easy_cleanup(curl);
    }
};

// The headers of the final reply (a redirect's own headers are forgotten at the next status
// line): the Content-Range a 206 starts at, and a paged listing's next link.
struct ReplyHeaders {
    std::string content_range;
    std::string link;
};

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
    auto* headers = static_cast<ReplyHeaders*>(user);
    const std::string line(data, size * count);
    if (line.starts_with("HTTP/")) {
        *headers = ReplyHeaders{};
        return size * count;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return size * count;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (name == "content-range") headers->content_range = value;
    if (name == "link") headers->link = value;
    return size * count;
}

// `<URL>; rel="next"` out of a Link header, or empty.
std::string next_link(const std::string& link) {
    size_t at = 0;
    while ((at = link.find('<', at)) != std::string::npos) {
        const size_t end = link.find('>', at);
        if (end == std::string::npos) break;
        const size_t comma = link.find(',', end);
        const std::string params =
            link.substr(end + 1, comma == std::string::npos ? std::string::npos : comma - end - 1);
        if (params.find("rel=\"next\"") != std::string::npos ||
            params.find("rel=next") != std::string::npos) {
            return link.substr(at + 1, end - at - 1);
        }
        at = end;
    }
    return {};
}

void common_options(CurlHandle& h, const std::string& url, const std::string& token,
                    ReplyHeaders& headers) {
    curl_easy_setopt(h.curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h.curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h.curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h.curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h.curl, CURLOPT_MAXREDIRS, kMaxRedirects);
    curl_easy_setopt(h.curl, CURLOPT_CONNECTTIMEOUT, kConnectSeconds);
    curl_easy_setopt(h.curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h.curl, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
    curl_easy_setopt(h.curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h.curl, CURLOPT_USERAGENT, "ember/0.1");
    curl_easy_setopt(h.curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h.curl, CURLOPT_HEADERDATA, &headers);
    if (!token.empty()) {
        h.headers = curl_slist_append(h.headers, ("Authorization: Bearer " + token).c_str());
        curl_easy_setopt(h.curl, CURLOPT_HTTPHEADER, h.headers);
    }
}

long status_of(CURL* curl) {
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

// "HTTP 404" with what the status means to someone pulling a model.
std::string describe_status(long status, const std::string& body) {
    std::string s = "HTTP " + std::to_string(status);
    if (status == 401 || status == 403) {
        s += " (access refused: a private or gated repository needs HF_TOKEN, and a gated one "
             "its terms accepted on the hub)";
    } else if (status == 404) {
        s += " (not found)";
    } else if (status == 429) {
        s += " (too many requests: try again later)";
    }
    std::string shown = body.substr(0, kMaxErrorBody);
    for (char& c : shown) {
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    if (!shown.empty()) s += ": " + shown;
    return s;
}

struct TextSink {
    std::string body;
    uint64_t max_bytes = 0;
    bool too_big = false;
};

size_t on_text(char* data, size_t size, size_t count, void* user) {
    auto* sink = static_cast<TextSink*>(user);
    if (sink->body.size() + size * count > sink->max_bytes) {
        sink->too_big = true;
        return 0;
    }
    sink->body.append(data, size * count);
    return size * count;
}

struct FileSink {
    CURL* curl = nullptr;
    std::FILE* file = nullptr;
    uint64_t have = 0;      // bytes in the file
    uint64_t expected = 0;  // what the listing announced
    uint64_t start = 0;     // where this reply's bytes go
    bool started = false;
    long status = 0;
    std::string error_body;  // an error reply's first bytes, for the message
    bool overflow = false;
    bool write_failed = false;
    const ProgressFn* progress = nullptr;
    const ReplyHeaders* headers = nullptr;
};

// The first byte a 206 reply carries ("bytes 100-199/200"), or -1.
int64_t range_start(const std::string& content_range) {
    uint64_t first = 0;
    if (std::sscanf(content_range.c_str(), "bytes %lu-", &first) != 1) return -1;
    return static_cast<int64_t>(first);
}

size_t on_file_bytes(char* data, size_t size, size_t count, void* user) {
    auto* sink = static_cast<FileSink*>(user);
    const size_t n = size * count;
    if (!sink->started) {
        sink->started = true;
        sink->status = status_of(sink->curl);
        if (sink->status == 200) {
            // The whole file, whatever was asked: what the .part held is overwritten.
            sink->start = 0;
        } else if (sink->status == 206) {
            const int64_t first = range_start(sink->headers->content_range);
            if (first < 0 || static_cast<uint64_t>(first) != sink->have) {
                sink->error_body = "the server answered the range request from byte " +
                                   std::to_string(first) + ", not " + std::to_string(sink->have);
                return 0;
            }
            sink->start = sink->have;
        }
        if (sink->status == 200 || sink->status == 206) {
            if (std::fseek(sink->file, static_cast<long>(sink->start), SEEK_SET) != 0 ||
                ftruncate(fileno(sink->file), static_cast<off_t>(sink->start)) != 0) {
                sink->write_failed = true;
                return 0;
            }
            sink->have = sink->start;
        }
    }
    if (sink->status != 200 && sink->status != 206) {
        if (sink->error_body.size() < kMaxErrorBody) sink->error_body.append(data, n);
        return n;
    }
    if (sink->have + n > sink->expected) {
        sink->overflow = true;
        return 0;
    }
    if (std::fwrite(data, 1, n, sink->file) != n) {
        sink->write_failed = true;
        return 0;
    }
    sink->have += n;
    if (sink->progress != nullptr && *sink->progress) (*sink->progress)(sink->have, sink->expected);
    return n;
}

}  // namespace

struct HttpClient::Impl {
    std::string token;
    CurlHandle escaper;
};

HttpClient::HttpClient(std::string token) : impl_(std::make_unique<Impl>()) {
    impl_->token = std::move(token);
    if (impl_->escaper.curl == nullptr) throw HubError("libcurl could not start");
}

HttpClient::~HttpClient() = default;

std::string HttpClient::escape_path(const std::string& path) const {
    std::string out;
    size_t at = 0;
    while (at <= path.size()) {
        size_t slash = path.find('/', at);
        if (slash == std::string::npos) slash = path.size();
        const std::string segment = path.substr(at, slash - at);
        char* escaped = curl_easy_escape(impl_->escaper.curl, segment.c_str(),
                                         static_cast<int>(segment.size()));
        if (escaped == nullptr) throw HubError("cannot encode the path " + path);
        out += escaped;
        curl_free(escaped);
        if (slash < path.size()) out += '/';
        at = slash + 1;
    }
    return out;
}

std::string HttpClient::get_text(const std::string& url, uint64_t max_bytes,
                                 std::string* next_url) {
    CurlHandle h;
    if (h.curl == nullptr) throw HubError("libcurl could not start");
    ReplyHeaders headers;
    TextSink sink;
    sink.max_bytes = max_bytes;
    common_options(h, url, impl_->token, headers);
    curl_easy_setopt(h.curl, CURLOPT_WRITEFUNCTION, on_text);
    curl_easy_setopt(h.curl, CURLOPT_WRITEDATA, &sink);
    const CURLcode rc = curl_easy_perform(h.curl);
    if (sink.too_big) {
        throw HubError(url + ": the reply passed " + std::to_string(max_bytes >> 20) +
                       " MiB, the bound on a listing");
    }
    if (rc != CURLE_OK) throw HubError(url + ": " + curl_easy_strerror(rc));
    const long status = status_of(h.curl);
    if (status != 200) throw HubError(url + ": " + describe_status(status, sink.body));
    if (next_url != nullptr) *next_url = next_link(headers.link);
    return sink.body;
}

DownloadOutcome HttpClient::download(const std::string& url, const fs::path& part,
                                     uint64_t expected_bytes, const ProgressFn& progress) {
    DownloadOutcome outcome;
    std::error_code ec;
    const uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
    if (ec) throw HubError(part.string() + ": " + ec.message());
    if (have == expected_bytes) {
        outcome.complete = true;
        return outcome;
    }
    if (have > expected_bytes) fs::resize_file(part, 0);
    std::FILE* file = std::fopen(part.c_str(), have > expected_bytes ? "w+b" : "a+b");
    if (file == nullptr) throw HubError(part.string() + ": cannot write: " + std::strerror(errno));
    CurlHandle h;
    ReplyHeaders headers;
    FileSink sink;
    sink.curl = h.curl;
    sink.file = file;
    sink.have = have > expected_bytes ? 0 : have;
    sink.expected = expected_bytes;
    sink.progress = &progress;
    sink.headers = &headers;
    common_options(h, url, impl_->token, headers);
    curl_easy_setopt(h.curl, CURLOPT_WRITEFUNCTION, on_file_bytes);
    curl_easy_setopt(h.curl, CURLOPT_WRITEDATA, &sink);
    const std::string range = std::to_string(sink.have) + "-";
    if (sink.have > 0) curl_easy_setopt(h.curl, CURLOPT_RANGE, range.c_str());
    const CURLcode rc = curl_easy_perform(h.curl);
    const bool closed_ok = std::fclose(file) == 0;
    if (sink.write_failed || !closed_ok) {
        outcome.fatal = true;
        outcome.error = "cannot write " + part.string() + ": " + std::strerror(errno);
    } else if (sink.overflow) {
        outcome.fatal = true;
        outcome.error = "the server sent more than the " + std::to_string(expected_bytes) +
                        " bytes the listing gives";
    } else if (sink.started && sink.status != 200 && sink.status != 206) {
        // 416 (range not satisfiable) for a whole .part is answered above by its size.
        outcome.fatal = true;
        outcome.error = describe_status(sink.status, sink.error_body);
    } else if (rc != CURLE_OK || !sink.started) {
        if (!sink.started && rc == CURLE_OK) {
            const long status = status_of(h.curl);
            outcome.fatal = status != 200 && status != 206;
            outcome.error = status == 200 || status == 206 ? "the reply had no body"
                                                           : describe_status(status, "");
        } else {
            outcome.error = sink.error_body.empty() ? curl_easy_strerror(rc) : sink.error_body;
            outcome.fatal = !sink.error_body.empty();
        }
    } else if (sink.have != expected_bytes) {
        outcome.error = "the connection closed at byte " + std::to_string(sink.have) + " of " +
                        std::to_string(expected_bytes);
    } else {
        outcome.complete = true;
    }
    return outcome;
}

std::string sha256_of_file(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw HubError("cannot read " + file.string());
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
        throw HubError("SHA-256 is not available from OpenSSL");
    }
    std::vector<char> buffer(1 << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const std::streamsize n = in.gcount();
        if (n > 0) EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n));
    }
    if (in.bad()) throw HubError("cannot read " + file.string());
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(ctx.get(), digest, &length);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) {
        hex += kHex[digest[i] >> 4];
        hex += kHex[digest[i] & 15];
    }
    return hex;
}

}  // namespace ember::app::hub
