#include "app/serve/streaming.h"

#include <optional>

#include "app/serve/front_door.h"

namespace ember::serve {

using json = nlohmann::json;

namespace {

std::string sse_event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

}  // namespace

json ReplyWriter::choice_json(const Job& job, const TurnResult& r) const {
    json choice = {{"index", 0}, {"finish_reason", finish_reason_text(r)}};
    if (job.chat) {
        json message = {{"role", "assistant"}, {"content", r.reply}};
        if (!r.tool_calls.empty()) {
            message["tool_calls"] = tool_calls_json(r.tool_calls);
            if (r.reply.empty()) message["content"] = nullptr;  // as OpenAI's API answers
        }
        if (!r.thinking.empty()) message["reasoning_content"] = r.thinking;
        choice["message"] = message;
    } else {
        choice["text"] = r.reply;
        choice["logprobs"] = nullptr;
    }
    return choice;
}

json ReplyWriter::envelope(const Job& job, bool chunk) const {
    return json{{"id", job.id},
                {"object", job.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                    : "text_completion"},
                {"created", job.created},
                {"model", options_.model_id}};
}

void ReplyWriter::respond_plain(Job& job, httplib::Response& res) {
    SlotLease lease = jobs_.take_slot(job.prompt);
    jobs_.compile_grammars(job);
    // Nothing is written until the reply is done, so a client that hangs up is only
    // seen by looking at its socket; each piece of text is a chance to stop.
    Connection* conn = current_connection();
    bool client_gone = false;
    const TurnResult r = jobs_.generate(job, lease, [&](const std::string&, TextKind) {
        client_gone = conn != nullptr && conn->client_closed();
        return !client_gone;
    });
    if (r.finish == FinishReason::Cancelled && !client_gone && http_.stopping()) {
        log_cut_short(job, r, lease.index(), CutShort::ServerStopping);
        throw shutting_down();
    }
    if (client_gone) {
        log_cut_short(job, r, lease.index(), CutShort::ClientGone);
        // No one reads this; 499 (nginx's "client closed request") makes the request log
        // line say what happened.
        res.status = 499;
        return;
    }
    json body = envelope(job, false);
    body["choices"] = json::array({choice_json(job, r)});
    body["usage"] = usage_json(r);
    body["ember"] = ember_json(r, lease.index());
    res.set_content(dump_json(body), "application/json");
    log_turn(job, r, lease.index());
}

void ReplyWriter::respond_stream(std::shared_ptr<Job> job, httplib::Response& res) {
    // The slot is taken before the headers go out, so a full queue is still a 503.
    auto lease = std::make_shared<std::optional<SlotLease>>(jobs_.take_slot(job->prompt));
    jobs_.compile_grammars(*job);  // before the headers too: a bad schema is still a 400
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, job, lease](size_t, httplib::DataSink& sink) {
            const bool complete = stream_job(*job, **lease, sink);
            lease->reset();  // free the slot now, not when the connection closes
            // true after sink.done() ends the response; false drops the connection.
            return complete;
        });
}

json ReplyWriter::delta_chunk(const Job& job, json delta, const json& finish) const {
    json chunk = envelope(job, true);
    json choice = {{"index", 0}, {"finish_reason", finish}};
    if (job.chat) {
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = delta.value("content", std::string());
        choice["logprobs"] = nullptr;
    }
    chunk["choices"] = json::array({choice});
    return chunk;
}

bool ReplyWriter::stream_job(Job& job, SlotLease& lease, httplib::DataSink& sink) {
    auto send = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
    bool client_gone =
        !send(sse_event(delta_chunk(job, json{{"role", "assistant"}, {"content", ""}}, nullptr)));
    if (client_gone) {
        log_line(options_, job.id + " client left before generation started");
        return false;
    }
    TurnResult r;
    try {
        r = jobs_.generate(
            job, lease,
            [&](const std::string& text, TextKind kind) {
                if (text.empty()) return true;
                const char* field = kind == TextKind::Thinking ? "reasoning_content" : "content";
                if (!send(sse_event(delta_chunk(job, json{{field, text}}, nullptr)))) {
                    client_gone = true;
                    return false;  // stops generating: the client closed the connection
                }
                return true;
            },
            [&](const ToolCallDelta& delta) {
                const json piece = {{"tool_calls", tool_call_delta_json(delta)}};
                if (!send(sse_event(delta_chunk(job, piece, nullptr)))) {
                    client_gone = true;
                    return false;
                }
                return true;
            });
    } catch (const std::exception& e) {
        send(sse_event(error_json(ApiError(500, e.what()))));
        log_line(options_, job.id + " failed: " + e.what());
        return false;
    }
    if (client_gone) {
        log_cut_short(job, r, lease.index(), CutShort::ClientGone);
        return false;
    }
    if (r.finish == FinishReason::Cancelled && http_.stopping()) {
        // What was sent stands; the stream ends with an error saying why it is cut short.
        log_cut_short(job, r, lease.index(), CutShort::ServerStopping);
        send(sse_event(error_json(shutting_down())));
        send("data: [DONE]\n\n");
        sink.done();
        return true;
    }
    send(sse_event(delta_chunk(job, json::object(), finish_reason_text(r))));
    if (job.include_usage) {
        json chunk = envelope(job, true);
        chunk["choices"] = json::array();
        chunk["usage"] = usage_json(r);
        chunk["ember"] = ember_json(r, lease.index());
        send(sse_event(chunk));
    }
    send("data: [DONE]\n\n");
    sink.done();
    log_turn(job, r, lease.index());
    return true;
}

void ReplyWriter::log_cut_short(const Job& job, const TurnResult& r, int slot, CutShort why) const {
    const std::string tokens = std::to_string(r.ids.size());
    const std::string where = " (slot " + std::to_string(slot) + ")";
    if (why == CutShort::ClientGone) {
        log_line(options_, job.id + " client disconnected after " + tokens +
                               " tokens; generation cancelled" + where);
    } else {
        log_line(options_,
                 job.id + " cancelled after " + tokens + " tokens: the server is stopping" + where);
    }
}

void ReplyWriter::log_turn(const Job& job, const TurnResult& r, int slot) const {
    log_line(
        options_,
        job.id + " slot " + std::to_string(slot) + ": prompt " + std::to_string(r.prompt_tokens) +
            " tokens (" + std::to_string(r.tokens_reused) + " reused, " +
            std::to_string(r.tokens_restored) + " of them from the state store), " +
            std::to_string(r.ids.size()) + " generated, " + finish_reason_text(r) +
            (r.tool_calls.empty() ? std::string()
                                  : ", " + std::to_string(r.tool_calls.size()) + " tool call(s)"));
    for (const auto& w : r.warnings) log_line(options_, job.id + " warning: " + w);
}

}  // namespace ember::serve
