// The XDG base directories (data, config, cache), shared by every part that keeps files for
// the user: the session database, line-mode history, the config file, the models directory.
#pragma once

#include <string>

namespace ember {

// $XDG_DATA_HOME, else $HOME/.local/share; empty when neither is set (relative XDG values are
// ignored, as the spec says).
std::string xdg_data_home();
// $XDG_CONFIG_HOME, else $HOME/.config.
std::string xdg_config_home();
// $XDG_CACHE_HOME, else $HOME/.cache.
std::string xdg_cache_home();
// $HOME, or empty.
std::string home_dir();

}  // namespace ember
