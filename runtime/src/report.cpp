// report.cpp: the job report as text (stderr) and JSON (report.json in --log-dir).
#include "xspawn/report.hpp"

#include <csignal>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "control.hpp"
#include "subprocess.hpp"

namespace xs {

std::string detail::signalName(int signal) {
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", signal);
}

using detail::signalName;

std::string RankOutcome::describeEnd() const {
  if (!started) return "never started";
  if (stalled) return "stalled, then killed by xspawn";
  if (!exited) return "still running";
  if (signal != 0) {
    const char* what = sigdescr_np(signal);
    return fmt::format("killed by signal {}{}", signalName(signal),
                       what ? fmt::format(" ({})", what) : "");
  }
  return fmt::format("exited with code {}", exitCode);
}

std::string JobReport::headline() const {
  if (succeeded()) return "";
  const RankOutcome* root = rootCause >= 0 ? &ranks[rootCause] : nullptr;
  std::string line;
  if (root && root->stalled) {
    std::vector<int> victims;
    for (const RankOutcome& r : ranks)
      if (r.secondary && !r.stalled) victims.push_back(r.rank);
    line = fmt::format("rank {} stalled: {} timed out waiting for it", root->rank,
                       victims.empty() ? std::string("the others") : detail::formatRanks(victims));
  } else if (root) {
    line = fmt::format("rank {} {}", root->rank, root->describeEnd());
  } else {
    line = !machineCause.empty() ? machineCause : std::string("no rank failed");
  }
  if (machines > 1) {
    line = fmt::format("[machine {} of {}{}] {}", machine, machines, host.empty() ? "" : " (" + host + ")", line);
  }
  return line;
}

namespace {

std::string rootCauseText(const RankOutcome& root, const std::vector<RankOutcome>& ranks) {
  std::string out;
  if (root.stalled) {
    std::vector<int> laggards;
    for (const RankOutcome& r : ranks)
      if (r.stalled) laggards.push_back(r.rank);
    out += fmt::format("root cause (did not arrive: {}):\n", detail::formatRanks(laggards));
    for (const RankOutcome& r : ranks) {
      if (!r.stalled) continue;
      out += fmt::format("  rank {} (local rank {}, pid {}): behind the others when they timed out, at {:.2f} s\n",
                         r.rank, r.localRank, r.pid, r.endSeconds);
      std::string stall = r.stall;
      for (std::size_t pos = 0; pos < stall.size();) {
        std::size_t end = stall.find('\n', pos);
        if (end == std::string::npos) end = stall.size();
        out += "    " + stall.substr(pos, end - pos) + "\n";
        pos = end + 1;
      }
    }
  } else {
    out += "root cause (first failure):\n";
    out += fmt::format("  rank {} (local rank {}, pid {}): {} after {:.2f} s\n", root.rank, root.localRank, root.pid,
                       root.describeEnd(), root.endSeconds);
    out += fmt::format("  error: {}\n", root.error.empty() ? "(none recorded)" : root.error);
    out += fmt::format("  last rendezvous: {}\n", root.lastOp.empty() ? "none" : root.lastOp);
  }
  if (!root.traceback.empty()) {
    out += fmt::format("  traceback of rank {}:\n", root.rank);
    for (const std::string& line : root.traceback) out += "    | " + line + "\n";
  }
  // The output before the traceback (the traceback is said above).
  std::vector<std::string> before;
  for (const std::string& line : root.outputTail) {
    if (!root.traceback.empty() && line == root.traceback.front()) break;
    before.push_back(line);
  }
  if (!before.empty()) {
    out += fmt::format("  last output of rank {}:\n", root.rank);
    for (const std::string& line : before) out += "    | " + line + "\n";
  }
  return out;
}

}  // namespace

std::string JobReport::text() const {
  std::string out;
  if (succeeded()) {
    out = fmt::format("xspawn: job '{}': all {} ranks exited 0 in {:.2f} s", jobId, worldSize, seconds);
    if (restartCount > 0) out += fmt::format(", after {} restart{}", restartCount, restartCount == 1 ? "" : "s");
    if (attempts.size() > 1) {
      const AttemptOutcome &failed = attempts[attempts.size() - 2], &last = attempts.back();
      if (failed.failureSeconds >= 0 && last.readySeconds >= 0) {
        out += fmt::format(" (the last one's gang was up {:.2f} s after the failure)", last.readySeconds - failed.failureSeconds);
      }
    }
    return out + "\n";
  }
  const RankOutcome* root = rootCause >= 0 ? &ranks[rootCause] : nullptr;
  if (!interruptedBy.empty()) {
    out += fmt::format("xspawn: job '{}' interrupted by {}; {}\n", jobId, interruptedBy, headline());
  } else {
    out += fmt::format("xspawn: job '{}' failed: {}\n", jobId, headline());
  }
  if (root) out += rootCauseText(*root, ranks);
  if (!root && !machineCause.empty()) {
    out += "root cause (on another machine, or between machines):\n";
    out += fmt::format("  {}\n", machineCause);
  }
  if (!abortText.empty()) out += fmt::format("job aborted ({}): {}\n", abortReason, abortText);
  if (!machinesFinished.empty()) {
    std::vector<int> machinesSorted = machinesFinished;
    std::string list;
    for (int m : machinesSorted) list += (list.empty() ? "" : ", ") + std::to_string(m);
    out += fmt::format("machine{} {} had already finished cleanly (every rank exited 0) and did not hear of this "
                       "failure: {} in MPI_Finalize until mpirun ends the job, whose exit status says it failed\n",
                       machinesSorted.size() == 1 ? "" : "s", list, machinesSorted.size() == 1 ? "it waits" : "they wait");
  }
  std::string others;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RankOutcome& r = ranks[i];
    if (static_cast<int>(i) == rootCause || r.stalled) continue;
    std::string line = fmt::format("  rank {} (pid {}): {}", r.rank, r.pid, r.describeEnd());
    if (root && root->stalled && r.secondary) line += " (a victim: it waited for the stalled rank)";
    else if (r.killedBySupervisor) line += " (stopped by xspawn after the failure)";
    if (!r.error.empty()) line += ": " + r.error;
    others += line + "\n";
  }
  if (!others.empty()) out += "other ranks:\n" + others;
  if (!ranksAt.empty()) out += "where every rank was: " + ranksAt + "\n";
  if (attempts.size() > 1) {
    out += "attempts:\n";
    for (const AttemptOutcome& a : attempts) {
      out += fmt::format("  attempt {} at {:.2f} s{}: {} after {:.2f} s{}\n", a.attempt, a.startSeconds,
                         a.readySeconds >= 0 ? fmt::format(" (gang up at {:.2f} s)", a.readySeconds) : "", a.status,
                         a.seconds, a.rootCause.empty() ? "" : ": " + a.rootCause);
    }
  }
  out += fmt::format("exit status {}\n", exitCode);
  return out;
}

std::string JobReport::json() const {
  using nlohmann::json;
  json doc;
  doc["job_id"] = jobId;
  doc["status"] = status;
  doc["exit_code"] = exitCode;
  doc["world_size"] = worldSize;
  doc["usable_cores"] = usableCores;
  doc["start_method"] = startMethod;
  doc["seconds"] = seconds;
  doc["process_group"] = processGroup;
  doc["interrupted_by"] = interruptedBy.empty() ? json(nullptr) : json(interruptedBy);
  doc["abort"] = abortReason.empty() ? json(nullptr)
                                     : json{{"reason", abortReason}, {"message", abortText}};
  doc["ranks_at"] = ranksAt;
  doc["machine"] = machine;
  doc["machines"] = machines;
  doc["host"] = host;
  doc["machine_cause"] = machineCause.empty() ? json(nullptr) : json(machineCause);
  doc["machines_finished"] = machinesFinished;
  auto rankJson = [](const RankOutcome& r) {
    json j;
    j["rank"] = r.rank;
    j["local_rank"] = r.localRank;
    j["pid"] = r.pid;
    j["end"] = r.describeEnd();
    j["exit_code"] = r.exited && r.signal == 0 ? json(r.exitCode) : json(nullptr);
    j["signal"] = r.signal ? json(signalName(r.signal)) : json(nullptr);
    j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
    j["secondary"] = r.secondary;
    j["stopped_by_xspawn"] = r.killedBySupervisor;
    j["end_seconds"] = r.endSeconds;
    j["bound_cpu"] = r.boundCpu;
    j["last_rendezvous"] = r.lastOp;
    j["output_tail"] = r.outputTail;
    j["traceback"] = r.traceback;
    j["stalled"] = r.stalled;
    j["stall"] = r.stall.empty() ? json(nullptr) : json(r.stall);
    return j;
  };
  doc["headline"] = headline();
  doc["restart_count"] = restartCount;
  doc["attempts"] = json::array();
  for (const AttemptOutcome& a : attempts) {
    doc["attempts"].push_back({{"attempt", a.attempt}, {"status", a.status}, {"exit_code", a.exitCode},
                               {"start_seconds", a.startSeconds}, {"seconds", a.seconds},
                               {"ready_seconds", a.readySeconds < 0 ? json(nullptr) : json(a.readySeconds)},
                               {"failure_seconds", a.failureSeconds < 0 ? json(nullptr) : json(a.failureSeconds)},
                               {"root_cause", a.rootCause.empty() ? json(nullptr) : json(a.rootCause)}});
  }
  doc["root_cause"] = rootCause >= 0 ? rankJson(ranks[rootCause]) : json(nullptr);
  doc["ranks"] = json::array();
  for (const RankOutcome& r : ranks) doc["ranks"].push_back(rankJson(r));
  doc["utilisation"] = utilisation.present ? json::parse(utilisation.json()) : json(nullptr);
  return doc.dump(2) + "\n";
}

}  // namespace xs
