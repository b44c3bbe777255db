#include "app/serve/front_door.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>

namespace ember::serve {

namespace {

using Clock = std::chrono::steady_clock;

thread_local Connection* t_connection = nullptr;
// Set while the accept thread itself runs a connection no worker could take.
thread_local bool t_overflow = false;

// A poll() wait is cut into slices this long, so a stopping server is noticed.
constexpr int kSliceMs = 100;

int ms_until(Clock::time_point t) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
}

void endpoint_of(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                        : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    char name[NI_MAXHOST];
    char service[NI_MAXSERV];
    if (rc != 0 || getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, name, sizeof name,
                               service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        ip.clear();
        port = 0;
        return;
    }
    ip = name;
    port = std::atoi(service);
}

// A thread for every connection, started when none is idle, up to `max_threads`; a worker
// idle for a while ends. Past the limit the connection is run on the accept thread with
// t_overflow set, where FrontDoor refuses it without reading it (no queue).
class ConnectionThreads : public httplib::TaskQueue {
public:
    explicit ConnectionThreads(size_t max_threads)
        : max_threads_(std::max<size_t>(1, max_threads)) {}
    ~ConnectionThreads() override { shutdown(); }

    void enqueue(std::function<void()> fn) override {
        std::unique_lock lock(mutex_);
        if (!stopping_ && (idle_ > jobs_.size() || threads_ < max_threads_)) {
            jobs_.push_back(std::move(fn));
            if (idle_ >= jobs_.size()) {
                wake_.notify_one();
            } else {
                ++threads_;
                std::thread([this] { work(); }).detach();
            }
            return;
        }
        lock.unlock();
        t_overflow = true;
        fn();
        t_overflow = false;
    }

    void shutdown() override {
        std::unique_lock lock(mutex_);
        stopping_ = true;
        wake_.notify_all();
        done_.wait(lock, [&] { return threads_ == 0; });
    }

private:
    void work() {
        std::unique_lock lock(mutex_);
        for (;;) {
            if (!jobs_.empty()) {
                auto job = std::move(jobs_.front());
                jobs_.pop_front();
                lock.unlock();
                job();
                job = nullptr;
                lock.lock();
                continue;
            }
            if (stopping_) break;
            ++idle_;
            const bool woken = wake_.wait_for(lock, std::chrono::seconds(30),
                                              [&] { return stopping_ || !jobs_.empty(); });
            --idle_;
            if (!woken) break;  // idle for long: this worker ends
        }
        --threads_;
        done_.notify_all();  // nothing of the pool is touched after the lock is released
    }

    const size_t max_threads_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::deque<std::function<void()>> jobs_;
    size_t threads_ = 0;
    size_t idle_ = 0;  // workers waiting for a job
    bool stopping_ = false;
};

// One thread that holds closing sockets for up to half a second, discarding their input.
class Lingerer {
public:
    static Lingerer& instance() {
        static Lingerer* l = new Lingerer;  // lives as long as the process
        return *l;
    }

    void add(int fd) {
        shutdown(fd, SHUT_WR);
        std::lock_guard lock(mutex_);
        pending_.push_back({fd, Clock::now() + std::chrono::milliseconds(500), 0});
        wake_.notify_one();
    }

private:
    struct Entry {
        int fd;
        Clock::time_point until;
        size_t drained;
    };

    Lingerer() {
        std::thread([this] { run(); }).detach();
    }

    void run() {
        std::vector<Entry> held;
        std::vector<pollfd> polls;
        char discard[16384];
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                if (held.empty()) wake_.wait(lock, [&] { return !pending_.empty(); });
                held.insert(held.end(), pending_.begin(), pending_.end());
                pending_.clear();
            }
            polls.clear();
            for (const auto& e : held) polls.push_back({e.fd, POLLIN, 0});
            poll(polls.data(), polls.size(), 20);
            const auto now = Clock::now();
            std::vector<Entry> kept;
            for (size_t i = 0; i < held.size(); ++i) {
                Entry e = held[i];
                bool done = now >= e.until || e.drained > (size_t{16} << 20);
                if (!done && (polls[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
                    const ssize_t n = recv(e.fd, discard, sizeof discard, MSG_DONTWAIT);
                    if (n <= 0) {
                        done = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
                    } else {
                        e.drained += static_cast<size_t>(n);
                    }
                }
                if (done) {
                    close(e.fd);
                } else {
                    kept.push_back(e);
                }
            }
            held.swap(kept);
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    std::vector<Entry> pending_;
};

}  // namespace

void linger_close(int fd) {
    if (fd >= 0) Lingerer::instance().add(fd);
}

Connection* current_connection() {
    return t_connection;
}

Connection::Connection(int fd, const FrontDoorLimits& limits, const std::atomic<bool>& stopping)
    : fd_(fd), limits_(limits), stopping_(stopping) {}

bool Connection::is_readable() const {
    if (buffer_begin_ < buffer_end_) return true;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(limits_.stall.count())) > 0;
}

bool Connection::is_writable() const {
    if (dead_) return false;
    pollfd p{fd_, POLLOUT, 0};
    return poll(&p, 1, static_cast<int>(limits_.stall.count())) > 0 && !client_closed();
}

bool Connection::wait_readable() {
    const auto stall_end = Clock::now() + limits_.stall;
    for (;;) {
        if (stopping_.load()) return false;
        const auto now = Clock::now();
        if (now >= deadline_) {
            timed_out_ = true;
            // A client that has not sent its headers in time gets nothing more.
            if (phase_ == Phase::Headers) dead_ = true;
            return false;
        }
        if (now >= stall_end) return false;
        pollfd p{fd_, POLLIN, 0};
        const int wait = std::min({ms_until(deadline_), ms_until(stall_end), kSliceMs});
        const int rc = poll(&p, 1, std::max(1, wait));
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return false;
    }
}

ssize_t Connection::read(char* ptr, size_t size) {
    if (dead_ || size == 0) return dead_ ? -1 : 0;
    if (phase_ == Phase::Headers && phase_bytes_ >= limits_.header_bytes) {
        headers_too_long_ = true;
        return -1;
    }
    if (phase_ == Phase::Body && (refuse_body_ || phase_bytes_ >= body_wire_limit_)) return -1;
    if (buffer_begin_ == buffer_end_) {
        if (!wait_readable()) return -1;
        const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), 0);
        if (n <= 0) return n;
        buffer_begin_ = 0;
        buffer_end_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, buffer_end_ - buffer_begin_);
    if (phase_ == Phase::Headers) n = std::min(n, limits_.header_bytes - phase_bytes_);
    if (phase_ == Phase::Body) n = std::min(n, body_wire_limit_ - phase_bytes_);
    std::memcpy(ptr, buffer_.data() + buffer_begin_, n);
    buffer_begin_ += n;
    phase_bytes_ += n;
    return static_cast<ssize_t>(n);
}

ssize_t Connection::write(const char* ptr, size_t size) {
    if (dead_) return -1;
    size_t sent = 0;
    while (sent < size) {
        pollfd p{fd_, POLLOUT, 0};
        const int rc = poll(&p, 1, static_cast<int>(limits_.stall.count()));
        if (rc <= 0) return -1;
        const ssize_t n = send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) return -1;
        sent += static_cast<size_t>(n);
    }
    wrote_ = true;
    return static_cast<ssize_t>(size);
}

void Connection::get_remote_ip_and_port(std::string& ip, int& port) const {
    endpoint_of(fd_, true, ip, port);
}

void Connection::get_local_ip_and_port(std::string& ip, int& port) const {
    endpoint_of(fd_, false, ip, port);
}

bool Connection::wait_for_request() {
    if (buffer_begin_ < buffer_end_) return true;
    const auto until = Clock::now() + limits_.keep_alive;
    while (!stopping_.load()) {
        pollfd p{fd_, POLLIN, 0};
        const int wait = std::min(ms_until(until), kSliceMs);
        const int rc = poll(&p, 1, wait);
        if (rc > 0) {
            char byte;
            return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
        }
        if (rc < 0 && errno != EINTR) return false;
        if (Clock::now() >= until) return false;
    }
    return false;
}

void Connection::begin_request() {
    phase_ = Phase::Headers;
    phase_bytes_ = 0;
    deadline_ = Clock::now() + limits_.header_time;
    refuse_body_ = false;
    timed_out_ = false;
    headers_too_long_ = false;
    wrote_ = false;
}

void Connection::headers_done(const httplib::Request& req) {
    phase_ = Phase::Body;
    phase_bytes_ = 0;
    deadline_ = Clock::now() + limits_.body_time;
    // Chunked framing may take as many bytes again as the body it carries.
    const size_t most = std::numeric_limits<size_t>::max();
    body_wire_limit_ =
        limits_.max_body > most / 4 ? most : 2 * limits_.max_body + (size_t{64} << 10);
    // A declared length over the limit is refused without reading it (httplib would read
    // and discard all of it first).
    if (req.has_header("Content-Length")) {
        const std::string& v = req.get_header_value("Content-Length");
        const unsigned long long length = std::strtoull(v.c_str(), nullptr, 10);
        if (length > limits_.max_body) refuse_body_ = true;
    }
}

bool Connection::client_closed() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    char byte;
    return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

FrontDoor::FrontDoor() {
    new_task_queue = [this] { return new ConnectionThreads(limits_.max_connections); };
    // httplib sets SO_REUSEPORT too, with which a second server on the same port starts
    // without an error and takes half the connections.
    set_socket_options([](int sock) {
        const int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
}

void FrontDoor::widen_listen_queue() {
    const int sock = svr_sock_;
    if (sock != INVALID_SOCKET) ::listen(sock, 1024);
}

FrontDoor::~FrontDoor() = default;

void FrontDoor::set_limits(const FrontDoorLimits& limits) {
    limits_ = limits;
}

void FrontDoor::begin_stop() {
    stopping_ = true;
    stop();
}

void FrontDoor::refuse(int sock) {
    const std::string head =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
        std::to_string(refusal_body_.size()) + "\r\n\r\n";
    const std::string all = head + refusal_body_;
    // A fresh socket's send buffer takes this whole: the accept thread never blocks here.
    (void)send(sock, all.data(), all.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    linger_close(sock);
}

bool FrontDoor::process_and_close_socket(int sock) {
    struct Count {
        std::atomic<size_t>& n;
        explicit Count(std::atomic<size_t>& a) : n(a) { ++n; }
        ~Count() { --n; }
    } count(active_);
    if (t_overflow || active_.load() > limits_.max_connections) {
        refuse(sock);
        return false;
    }
    const int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Connection conn(sock, limits_, stopping_);
    t_connection = &conn;
    bool ret = false;
    bool lingering = false;
    for (size_t left = std::max<size_t>(1, keep_alive_max_count_); left > 0; --left) {
        if (svr_sock_ == INVALID_SOCKET || !conn.wait_for_request()) break;
        conn.begin_request();
        bool closed = false;
        ret = process_request(conn, left == 1 || stopping_.load(), closed,
                              [&conn](httplib::Request& req) { conn.headers_done(req); });
        if (conn.headers_too_long() && !conn.wrote_response()) {
            // The request line alone ran past the limit: httplib gave up without answering.
            const std::string body =
                R"({"error":{"message":"the request line and headers are longer than )" +
                std::to_string(limits_.header_bytes) +
                R"( bytes","type":"invalid_request_error","param":null,"code":null}})";
            const std::string head =
                "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: "
                "application/json\r\nConnection: close\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n";
            conn.write(head.data(), head.size());
            conn.write(body.data(), body.size());
        }
        if (conn.closing() || conn.headers_too_long() || conn.timed_out()) {
            // A client that did not send its headers in time is dropped without more ado.
            lingering = !(conn.timed_out() && !conn.in_body());
            break;
        }
        if (!ret || closed || stopping_.load()) break;
        // httplib answered a request line or header it could not parse (400) without reading
        // the rest: what follows on the connection is not a request. Close it.
        if (!conn.in_body()) break;
    }
    t_connection = nullptr;
    if (lingering) {
        linger_close(sock);
    } else {
        shutdown(sock, SHUT_RDWR);
        close(sock);
    }
    return ret;
}

}  // namespace ember::serve
