// traceback.cpp: the Python traceback of a worker's stderr (see traceback.hpp).
#include "traceback.hpp"

#include <fmt/format.h>

namespace xs::detail {
namespace {

constexpr const char* kStart = "Traceback (most recent call last):";
bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool chains(const std::string& s) {
  return startsWith(s, "During handling of the above exception") ||
         startsWith(s, "The above exception was the direct cause");
}

}  // namespace

void TracebackCatcher::add(const std::string& text) {
  // Past kMaxLines, the middle goes: the first frames say where it started, the last where it broke.
  if (open_.size() >= kMaxLines) {
    open_.erase(open_.begin() + kMaxLines / 4);
    ++dropped_;
  }
  open_.push_back(text);
}

void TracebackCatcher::line(const std::string& text) {
  switch (state_) {
    case State::kIdle:
      if (text == kStart) open_ = {text}, dropped_ = 0, state_ = State::kInside;
      return;
    case State::kInside:
      add(text);
      // Frames and source lines are indented; the first line that is not ends the traceback.
      if (!text.empty() && text[0] != ' ' && text != kStart) {
        if (dropped_) open_.insert(open_.begin() + kMaxLines / 4, fmt::format("  ... {} lines left out ...", dropped_));
        done_ = open_;
        state_ = State::kAfter;
      }
      return;
    case State::kAfter:
      if (text.empty()) return;
      if (chains(text)) {
        add("");
        add(text);
        add("");
        return;
      }
      if (text == kStart) {
        // The next exception of a chain when it follows one, else a new traceback.
        if (!open_.empty() && chains(open_[open_.size() - 2])) {
          add(text);
        } else {
          open_ = {text}, dropped_ = 0;
        }
        state_ = State::kInside;
        return;
      }
      state_ = State::kIdle;
      return;
  }
}

void TracebackCatcher::clear() {
  state_ = State::kIdle;
  open_.clear();
  done_.clear();
  dropped_ = 0;
}

}  // namespace xs::detail
