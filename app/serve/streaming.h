// Writing a job's reply (jobs.h) back to its client in OpenAI's shapes: one JSON body once
// the reply is done, or server-sent events as it is generated (a chunk a piece of text or
// of a tool call, then the finish reason, the usage if asked for, and [DONE]). A client that
// hangs up stops the generation; a stopping server ends a stream with an error event.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "app/serve/jobs.h"

namespace ember::serve {

class FrontDoor;

class ReplyWriter {
public:
    // Every reference must outlive the writer.
    ReplyWriter(JobRunner& jobs, const ServerOptions& options, const FrontDoor& http)
        : jobs_(jobs), options_(options), http_(http) {}

    // Runs the job on a slot and answers with the whole reply.
    void respond_plain(Job& job, httplib::Response& res);
    // Takes a slot and compiles the job's grammars (so a full queue is still a 503 and a bad
    // schema a 400), then streams the reply as server-sent events.
    void respond_stream(std::shared_ptr<Job> job, httplib::Response& res);

private:
    // Returns whether the response was completed (false: the connection is to be dropped).
    bool stream_job(Job& job, SlotLease& lease, httplib::DataSink& sink);
    nlohmann::json choice_json(const Job& job, const TurnResult& r) const;
    nlohmann::json envelope(const Job& job, bool chunk) const;
    nlohmann::json delta_chunk(const Job& job, nlohmann::json delta,
                               const nlohmann::json& finish) const;
    void log_turn(const Job& job, const TurnResult& r, int slot) const;
    // A reply that ended before its end: the client hung up, or the server is stopping.
    enum class CutShort { ClientGone, ServerStopping };
    void log_cut_short(const Job& job, const TurnResult& r, int slot, CutShort why) const;

    JobRunner& jobs_;
    const ServerOptions& options_;
    const FrontDoor& http_;
};

}  // namespace ember::serve
