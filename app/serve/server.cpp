#include "app/serve/server.h"

#include <filesystem>

#include "app/serve/front_door.h"
#include "app/serve/jobs.h"
#include "app/serve/routes.h"
#include "app/serve/streaming.h"
#include "engine/model/model.h"

namespace ember::serve {

namespace {

// The options with the model's name filled in where none was given.
ServerOptions with_model_id(ServerOptions options, const Model& model) {
    if (options.model_id.empty()) {
        options.model_id = std::filesystem::path(model.path()).stem().string();
    }
    return options;
}

}  // namespace

// The server's parts, each with one job: the routes check requests and make jobs of them,
// the job runner renders prompts and runs jobs on the slots, the reply writer answers (a
// JSON body or a stream of events). They are built in this order and refer to those before.
struct Server::Impl {
    ServerOptions options;
    FrontDoor http;
    JobRunner jobs;
    ReplyWriter replies;
    Routes routes;
    int port = 0;

    Impl(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
         PrefixStore* store, ServerOptions server_options)
        : options(with_model_id(std::move(server_options), model)),
          jobs(model, pool, std::move(conversation_options), store, options, http),
          replies(jobs, options, http),
          routes(http, jobs, replies, options,
                 std::filesystem::path(model.path()).filename().string()) {}
};

Server::Server(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
               PrefixStore* store, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, pool, std::move(conversation_options), store,
                                   std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
    const auto& o = impl_->options;
    int port = o.port;
    if (port == 0) {
        port = impl_->http.bind_to_any_port(o.host);
        if (port < 0) throw std::runtime_error("cannot listen on " + o.host);
    } else if (!impl_->http.bind_to_port(o.host, port)) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(port) +
                                 " (in use, or not an address of this machine)");
    }
    impl_->http.widen_listen_queue();
    impl_->port = port;
    return port;
}

void Server::run() {
    impl_->http.listen_after_bind();
}

DecodeBatchStats Server::decode_stats() {
    return impl_->jobs.decode_stats();
}

int Server::decode_batch() const {
    return impl_->jobs.decode_batch();
}

void Server::stop() {
    // No new connection, no new slot; every generation stops at its next piece of text.
    impl_->jobs.close();
    impl_->http.begin_stop();
}

}  // namespace ember::serve
