// A conversation's settings and a prompt's attachments as the session store keeps them (JSON
// text in the conversations.sampling and messages.settings / messages.attachments columns),
// and back. The settings JSON is the one chat_settings_json() writes (session_adapter.h),
// which replay reads; the values /set and /preset change are written over it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ui/chat/session_backend.h"

namespace ember::app {

// `stored` (a conversation's settings JSON; anything else is taken as none) with the values of
// `settings` written over it; what else it holds (stop strings, KV type, speculation) stays.
std::string settings_with(const std::string& stored, const ui::ChatSettings& settings);

// The settings `stored` holds; nullopt when it is not a settings object (a damaged or
// hand-edited column). Keys it lacks (older conversations) keep ChatSettings' defaults, except
// the sampling ones, which keep SamplingParams'.
std::optional<ui::ChatSettings> settings_from(const std::string& stored);

// A float as the JSON number a person wrote (0.8, not 0.800000011920929).
double decimal(float value);

std::string attachments_to_json(const std::vector<ui::AttachmentNote>& attachments);
// What does not parse as a list of attachments is none.
std::vector<ui::AttachmentNote> attachments_from_json(const std::string& stored);

}  // namespace ember::app
