// The full-screen UI's work on the worker thread: starting a reply or a command, and taking
// in what it streams and what it leaves behind.
#include <exception>

#include "ui/tui/app_impl.h"

namespace ember::ui {

namespace {

constexpr int64_t kSessionLimit = 50;

bool is_streaming_reply(const tui::Entry& e) {
    return e.kind == tui::EntryKind::Assistant && e.streaming;
}

}  // namespace

void FullScreen::Impl::start_job(JobKind kind, const std::string& line) {
    job = kind;
    job_started = Clock::now();
    // A model takes a while to load and cannot be stopped: the status line says what it waits
    // for instead of "replying".
    job_activity.clear();
    if (kind == JobKind::Command && line.starts_with("/model ")) {
        const size_t name = line.find_first_not_of(" \t", 7);
        if (name != std::string::npos) job_activity = "loading " + line.substr(name);
    }
    if (kind == JobKind::Command && line.starts_with("/file ")) {
        // A big file takes a moment to read and count: the status line says so.
        job_activity = "reading " + line.substr(6);
    }
    if (kind == JobKind::Command && confirming_tool) {
        // The answer to a tool call's question: a yes runs the tool (within its time limit).
        job_activity = "tool call";
    }
    confirming_tool = false;
    streamed = 0;
    reply_thinking = false;
    prefill_total.store(0);
    prefill_done.store(0);
    prefill_millis.store(0);
    cancel.store(false);
    // The transcript shows the turn at once; if the job fails it is rebuilt from the
    // conversation the job leaves behind.
    const auto pop_last = [&](tui::EntryKind kind_to_pop) {
        if (!transcript.empty() && transcript.entries().back().kind == kind_to_pop) {
            transcript.pop_back();
            return true;
        }
        return false;
    };
    if (kind == JobKind::Reply) {
        // What goes with the prompt shows with it, collapsed (the worker has not started:
        // the controller is this thread's).
        transcript.add({tui::EntryKind::User,
                        ChatController::shown_prompt(line.starts_with("//") ? line.substr(1) : line,
                                                     controller->pending_attachments())});
    } else if (kind == JobKind::Regenerate) {
        pop_last(tui::EntryKind::Assistant);
    } else if (kind == JobKind::Edit) {
        pop_last(tui::EntryKind::Assistant);
        pop_last(tui::EntryKind::User);
        const size_t space = line.find_first_of(" \n");
        const size_t text =
            space == std::string::npos ? line.size() : line.find_first_not_of(" \n", space);
        transcript.add(
            {tui::EntryKind::User, text == std::string::npos ? std::string() : line.substr(text)});
    } else if (kind == JobKind::Continue && !transcript.empty() &&
               transcript.entries().back().kind == tui::EntryKind::Assistant) {
        // The cut reply grows in place.
        transcript.update(transcript.size() - 1, [](tui::Entry& e) {
            e.streaming = true;
            e.footer.clear();
        });
    }
    if (kind == JobKind::Reply || kind == JobKind::Regenerate || kind == JobKind::Edit ||
        kind == JobKind::ToolsContinue) {
        mark_reply_model(controller->model_name());
        tui::Entry reply{tui::EntryKind::Assistant};
        reply.streaming = true;
        transcript.add(std::move(reply));
    }
    worker->post([this, kind, line] {
        tui::DoneEvent done;
        const TextCallback on_text = [this](const std::string& text, TextKind text_kind) {
            events.push(tui::StreamEvent{text_kind, text, 1});
            return !cancel.load();
        };
        try {
            if (kind == JobKind::Reply) {
                done.outcome = controller->submit(line, on_text);
            } else if (kind == JobKind::ToolsContinue) {
                done.outcome = controller->continue_after_tools(on_text);
            } else if (kind != JobKind::Refresh) {
                done.outcome = controller->handle_command(line, on_text);
            }
        } catch (const std::exception& e) {
            done.outcome.error = true;
            done.outcome.message = e.what();
            done.outcome.conversation_replaced = true;
        }
        // A snapshot for the UI thread, which does not touch the controller.
        done.messages = controller->engine().messages();
        done.notes = controller->message_notes();
        // A conversation replaced (/new, /load, /model) or a context made afresh (/set ctx)
        // holds nothing evaluated yet: what the conversation will take.
        const int64_t used = controller->engine().context_used();
        const bool afresh = !done.outcome.turn && (done.outcome.conversation_replaced || used == 0);
        done.context_used = afresh ? controller->engine().context_needed() : used;
        done.context_total = controller->engine().context_size();
        done.show_stats = controller->show_stats();
        done.model_name = controller->model_name();
        if (line.starts_with("/model")) done.model_names = controller->model_names();
        try {
            done.sessions = controller->list_sessions(kSessionLimit);
            done.session_id = controller->session_id();
        } catch (const std::exception& e) {
            if (done.outcome.message.empty()) {
                done.outcome.error = true;
                done.outcome.message = std::string("sessions: ") + e.what();
            }
        }
        events.push(std::move(done));
    });
}

void FullScreen::Impl::apply(tui::StreamEvent& event) {
    streamed += event.pieces;
    reply_thinking = event.kind == TextKind::Thinking;
    if (transcript.empty() || !is_streaming_reply(transcript.entries().back())) {
        tui::Entry reply{tui::EntryKind::Assistant};
        reply.streaming = true;
        transcript.add(std::move(reply));
    }
    transcript.update(transcript.size() - 1, [&](tui::Entry& e) {
        (event.kind == TextKind::Thinking ? e.thinking : e.text) += event.text;
    });
}

void FullScreen::Impl::mark_reply_model(const std::string& model) {
    if (model.empty()) return;
    // A line where the model changes (after /model, or in a conversation several wrote).
    if (!shown_reply_model.empty() && model != shown_reply_model) {
        transcript.add({tui::EntryKind::Notice, "model: " + model});
    }
    shown_reply_model = model;
}

void FullScreen::Impl::rebuild_transcript(const std::vector<ChatMessage>& messages,
                                          const std::vector<MessageNotes>& notes) {
    transcript.clear();
    shown_reply_model.clear();
    // Replies by a model other than the one answering now are named from the first on.
    const std::string answering = controller != nullptr ? controller->model_name() : "";
    bool first_reply = true;
    size_t index = 0;  // into notes: non-system messages
    for (const auto& m : messages) {
        const MessageNotes* note = nullptr;
        if (m.role != "system") {
            if (index < notes.size()) note = &notes[index];
            ++index;
        }
        if (m.role == "user") {
            transcript.add(
                {tui::EntryKind::User,
                 note != nullptr ? ChatController::shown_message(m.content, *note) : m.content});
        } else if (m.role == "assistant") {
            if (note != nullptr && !note->model.empty()) {
                if (first_reply && shown_reply_model.empty() && !answering.empty() &&
                    note->model != answering) {
                    transcript.add({tui::EntryKind::Notice, "model: " + note->model});
                }
                mark_reply_model(note->model);
            }
            first_reply = false;
            if (!m.content.empty() || !m.thinking.empty() || m.tool_calls.empty()) {
                tui::Entry reply{tui::EntryKind::Assistant, m.content};
                reply.thinking = m.thinking;
                transcript.add(std::move(reply));
            }
            for (const ToolCall& call : m.tool_calls) {
                transcript.add({tui::EntryKind::Tool, "tool call: " + describe_call(call)});
            }
        } else if (m.role == "tool") {
            transcript.add({tui::EntryKind::Tool, shown_result(m)});
        }
    }
}

void FullScreen::Impl::apply(tui::DoneEvent& event) {
    const JobKind kind = job;
    job = JobKind::None;
    job_activity.clear();
    reply_thinking = false;
    const ChatOutcome& outcome = event.outcome;
    const bool generating = kind == JobKind::Reply || kind == JobKind::Regenerate ||
                            kind == JobKind::Edit || kind == JobKind::Continue ||
                            kind == JobKind::ToolsContinue;
    // A prompt that got no reply (a server gone, a context too small) stays on screen with
    // the reason under it: it is saved, and the user may want to send it again.
    const bool prompt_failed = kind == JobKind::Reply && outcome.error && !outcome.turn;
    // /edit always reports the conversation replaced; the transcript already shows the edit.
    const bool rebuild =
        !prompt_failed &&
        ((outcome.conversation_replaced && !(kind == JobKind::Edit && !outcome.error)) ||
         (outcome.error && generating));
    if (prompt_failed) {
        if (!transcript.empty() && is_streaming_reply(transcript.entries().back())) {
            transcript.pop_back();
        }
        transcript.add({tui::EntryKind::Error, outcome.message});
        follow = true;
    } else if (rebuild) {
        rebuild_transcript(event.messages, event.notes);
        follow = true;
    } else if (!transcript.empty() && is_streaming_reply(transcript.entries().back())) {
        const tui::Entry& last = transcript.entries().back();
        if (last.text.empty() && last.thinking.empty() && !outcome.turn) {
            transcript.pop_back();
        } else {
            transcript.update(transcript.size() - 1, [](tui::Entry& e) { e.streaming = false; });
        }
    }
    if (outcome.turn) {
        last_turn = outcome.turn;
        for (size_t i = transcript.size(); i-- > 0;) {
            if (transcript.entries()[i].kind != tui::EntryKind::Assistant) continue;
            // The numbers stay in the status line; the transcript gets them on request.
            transcript.update(i, [&](tui::Entry& e) {
                e.footer = event.show_stats ? ChatController::turn_summary(*outcome.turn)
                                            : ChatController::turn_notes(*outcome.turn);
            });
            break;
        }
    } else if (outcome.conversation_replaced && !outcome.error) {
        last_turn.reset();
    }
    context_used = event.context_used;
    context_total = event.context_total;
    if (!event.model_name.empty()) model_name = event.model_name;
    if (!event.model_names.empty()) model_names = std::move(event.model_names);
    if (!event.session_id.empty() || outcome.conversation_replaced) session_id = event.session_id;
    if (!event.sessions.empty() || kind == JobKind::Refresh) sessions = std::move(event.sessions);
    if (picker_open && kind != JobKind::Refresh) picker_open = false;
    if (!outcome.message.empty()) {
        if (outcome.message.find('\n') != std::string::npos && !prompt_failed) {
            transcript.add(
                {outcome.error ? tui::EntryKind::Error : tui::EntryKind::Notice, outcome.message});
            follow = true;
        }
        show_message(outcome.message, outcome.error);
    }
    if (outcome.turn && outcome.turn->finish == FinishReason::Cancelled &&
        outcome.message.empty()) {
        show_message(outcome.turn->tokens_not_evaluated > 0
                         ? "stopped while reading the prompt; what was read is kept"
                         : "reply stopped; what was written is kept",
                     false);
    }
    show_tool_activity(outcome);
    if (outcome.quit) quit = true;
}

void FullScreen::Impl::show_tool_activity(const ChatOutcome& outcome) {
    for (const std::string& result : outcome.tool_results) {
        transcript.add({tui::EntryKind::Tool, result});
        follow = true;
    }
    if (!outcome.tool_proposal.empty()) {
        // The question stays in the conversation view; the status line says how to answer.
        transcript.add({tui::EntryKind::Tool,
                        outcome.tool_proposal + "\n[y/N] y runs it; " + "anything else declines"});
        follow = true;
    }
    if (outcome.confirm) {
        confirming = true;
        confirming_tool = !outcome.tool_proposal.empty();
    }
    // The results are in: the model reads them and goes on, as a reply of its own.
    if (outcome.tools_continue && !outcome.quit) start_job(JobKind::ToolsContinue, {});
}

}  // namespace ember::ui
