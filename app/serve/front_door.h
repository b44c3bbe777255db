// The server's front door: how `ember serve` reads requests off its sockets, so that no
// client can hold it.
//
// cpp-httplib 0.11 (Debian's) parses the requests, but its socket layer trusts the client:
// a request line or header block is buffered however long it grows, a read timeout applies
// to each read (a client sending a byte every few seconds holds a thread forever), and
// connections past the thread pool wait in an invisible queue, /health among them. Its
// Server lets a subclass take over each accepted socket, so FrontDoor reads through its own
// Stream (Connection) with:
//   - a deadline for a request's headers (--read-timeout from its first byte) and one for
//     its body (--body-timeout from the end of its headers), besides each read's stall limit;
//   - a bound on the request line and headers together (64 KiB: 431) and on the bytes a body
//     may take on the wire (a chunk-size line cannot grow without bound either);
//   - a thread for every connection, up to --max-connections; beyond that a connection is
//     answered 503 at once, without reading it;
//   - a way for a handler to see its own connection (hang-ups, closing after a refusal).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace ember::serve {

struct FrontDoorLimits {
    std::chrono::milliseconds header_time{10000};  // first byte of a request to its blank line
    std::chrono::milliseconds body_time{30000};    // end of the headers to the end of the body
    std::chrono::milliseconds stall{10000};        // one read or write waits at most this
    std::chrono::milliseconds keep_alive{5000};    // an idle kept-alive connection waits this
    size_t header_bytes = size_t{64} << 10;        // request line and headers together
    size_t max_body = size_t{4} << 20;             // a Content-Length above it is not read
    size_t max_connections = 512;                  // connections served at once
};

// One client connection, as a Stream for httplib's parser. A handler finds its own with
// current_connection().
class Connection : public httplib::Stream {
public:
    Connection(int fd, const FrontDoorLimits& limits, const std::atomic<bool>& stopping);

    bool is_readable() const override;
    bool is_writable() const override;
    ssize_t read(char* ptr, size_t size) override;
    ssize_t write(const char* ptr, size_t size) override;
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    int socket() const override { return fd_; }

    // Waits for the first byte of the next request (buffered or on the socket); false when
    // the connection closes, stays idle past the keep-alive limit, or the server stops.
    bool wait_for_request();
    // A request begins (its header deadline starts now).
    void begin_request();
    // The headers are in (httplib calls this before routing): the body's deadline starts.
    void headers_done(const httplib::Request& req);

    // Whether the client has closed the connection (end-of-file, or an error); bytes
    // waiting (a pipelined request) mean it is still there.
    bool client_closed() const;
    // The handler refused a body it did not read: the connection ends after the response.
    void close_after_response() { close_after_ = true; }
    bool closing() const { return close_after_; }
    // Why the last read failed: the request's deadline passed, or its headers were too long.
    bool timed_out() const { return timed_out_; }
    bool headers_too_long() const { return headers_too_long_; }
    bool wrote_response() const { return wrote_; }
    bool in_body() const { return phase_ == Phase::Body; }
    const FrontDoorLimits& limits() const { return limits_; }

private:
    enum class Phase { Idle, Headers, Body };
    // Waits until the socket is readable, within the stall limit and the phase's deadline.
    bool wait_readable();

    int fd_;
    const FrontDoorLimits& limits_;
    const std::atomic<bool>& stopping_;
    Phase phase_ = Phase::Idle;
    std::chrono::steady_clock::time_point deadline_{};
    size_t phase_bytes_ = 0;  // bytes handed to the parser in this phase
    size_t body_wire_limit_ = 0;
    bool refuse_body_ = false;
    bool timed_out_ = false;
    bool headers_too_long_ = false;
    bool dead_ = false;  // a header deadline passed: nothing more is read or written
    bool wrote_ = false;
    bool close_after_ = false;
    std::vector<char> buffer_ = std::vector<char>(16384);
    size_t buffer_begin_ = 0, buffer_end_ = 0;
};

// The connection the calling thread is serving; null outside a request handler.
Connection* current_connection();

// httplib's Server with FrontDoor's socket layer (see the file comment).
class FrontDoor : public httplib::Server {
public:
    FrontDoor();
    ~FrontDoor() override;
    void set_limits(const FrontDoorLimits& limits);
    // The body a connection refused beyond --max-connections gets (a JSON error).
    void set_refusal_body(std::string body) { refusal_body_ = std::move(body); }
    // After bind: a listen queue for a burst of clients (httplib's is 5 connections long;
    // past it the kernel drops connection attempts, which clients retry after a second).
    void widen_listen_queue();
    // Connections being served now.
    size_t connections() const { return active_.load(); }
    // Stops accepting and ends idle and half-read connections; requests already being
    // answered finish (their handlers see stopping()).
    void begin_stop();
    bool stopping() const { return stopping_.load(); }

private:
    bool process_and_close_socket(int sock) override;
    void refuse(int sock);

    FrontDoorLimits limits_;
    std::string refusal_body_;
    std::atomic<bool> stopping_{false};
    std::atomic<size_t> active_{0};
};

// Keeps sockets open for a moment after their last answer, reading and discarding what
// their clients still send, then closes them: closing a socket with unread data resets the
// connection, which can destroy the answer before the client reads it.
void linger_close(int fd);

}  // namespace ember::serve
