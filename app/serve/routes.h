// The HTTP side of `ember serve`: the routes and what each checks before any work is done
// (the API key, the body's size and arrival, the request's fields, the model's name, the
// context's room), turning a request into a Job (jobs.h) whose reply streaming.h writes.
// Every error leaves as OpenAI's JSON shape with its status, never as an escaped exception.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "app/serve/jobs.h"
#include "app/serve/streaming.h"

namespace ember::serve {

class FrontDoor;

class Routes {
public:
    // Installs the routes and the server's limits on `http`. Every reference must outlive the
    // routes; `model_file_name` is the model file's name, which requests may use as well.
    Routes(FrontDoor& http, JobRunner& jobs, ReplyWriter& replies, const ServerOptions& options,
           std::string model_file_name);

private:
    void install();
    void check_model(const std::string& requested) const;
    // The reply's length limit: what was asked, within the room the context leaves.
    int64_t max_tokens_for(const std::optional<int64_t>& asked, size_t prompt_tokens) const;
    Job make_job(bool chat, const SamplingRequest& s);
    void handle_chat(const httplib::Request&, const std::string& body, httplib::Response& res);
    void handle_completion(const httplib::Request&, const std::string& body,
                           httplib::Response& res);
    nlohmann::json models_json() const;
    nlohmann::json health_json() const;
    // Whether the request carries the API key (always, with none set); otherwise answers 401.
    bool authorized(const httplib::Request& req, httplib::Response& res) const;
    // Runs a handler, turning its errors into API errors (never an escaped exception).
    template <typename F>
    httplib::Server::Handler guarded(F handler);
    // The request body, read up to --max-body.
    std::string read_body(httplib::Response& res, const httplib::ContentReader& read) const;
    // A POST route: `handler(req, body, res)`, with the body read by read_body() when the
    // request has one (httplib passes a reader), or empty.
    template <typename F>
    void post_route(const std::string& path, F handler);

    FrontDoor& http_;
    JobRunner& jobs_;
    ReplyWriter& replies_;
    const ServerOptions& options_;
    std::string file_name_;
    std::atomic<uint64_t> next_id_{0};
};

}  // namespace ember::serve
