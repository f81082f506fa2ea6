"""The R side of cell outcomes: the ``R_PROFILE_USER`` file whose ``options(error=...)`` hook records an
error nobody handled (and tells an interrupt apart by a sentinel), and which makes R's installers
fail at once (no network in the sandbox). See ``_outcome``."""

from __future__ import annotations

import json

from console_bridge._cells._outcome_log import outcome_dir_name

__all__ = ["r_profile_text"]


_R_PROFILE = r"""
local({
  folder <- file.path(Sys.getenv("TMPDIR"), %(dir)s)
  user <- %(user)s
  dir.create(folder, showWarnings = FALSE, mode = "0700")
  if (!file.exists(file.path(folder, "outcomes.jsonl"))) file.create(file.path(folder, "outcomes.jsonl"))
  if (nzchar(user) && file.exists(user)) sys.source(user, envir = globalenv())
  esc <- function(s) {
    s <- enc2utf8(paste(as.character(s), collapse = "\n"))
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    gsub("[[:cntrl:]]", " ", s)
  }
  # R runs options(error) for an interrupt too, without a new error message: a sentinel left
  # in the error message after each report tells the two apart.
  sentinel <- "console-bridge: no error message since the last report"
  reset <- function() try(stop(sentinel, call. = FALSE), silent = TRUE)
  hook <- function() {
    try(silent = TRUE, {
      text <- geterrmessage()
      message <- sub("^Error(?: in .*?)? ?:[ \n]*", "", text, perl = TRUE)
      message <- sub("\n+$", "", message)
      name <- "simpleError"
      if (identical(message, sentinel)) {
        name <- "interrupt"
        message <- "the cell was interrupted"
        text <- message
      }
      frames <- sys.frames()
      for (frame in rev(frames)) {
        if (exists("cond", envir = frame, inherits = FALSE)) {
          cond <- get("cond", envir = frame, inherits = FALSE)
          if (inherits(cond, "condition")) { name <- class(cond)[1L]; break }
        }
      }
      calls <- vapply(sys.calls(), function(x) paste(deparse(x, nlines = 1L), collapse = ""), "")
      calls <- calls[!grepl("^\\(?function \\(\\)", calls)]
      dir.create(folder, showWarnings = FALSE, mode = "0700")
      line <- paste0("{\"type\": \"failure\", \"language\": \"r\", \"name\": \"", esc(name),
                     "\", \"message\": \"", esc(message), "\", \"traceback\": \"",
                     esc(paste(c(rev(calls), sub("\n+$", "", text)), collapse = "\n")),
                     "\", \"kind\": \"exception\"}")
      log <- file.path(folder, "outcomes.jsonl")
      had <- file.size(log)
      wrote <- tryCatch({ cat(line, "\n", file = log, append = TRUE, sep = ""); TRUE }, error = function(e) FALSE,
                        warning = function(w) FALSE)
      # A full TMPDIR or an I/O error: the record goes in the cell's output instead, never lost.
      if (!wrote || is.na(had) || is.na(file.size(log)) || file.size(log) < had + nchar(line, type = "bytes") + 1)
        cat(paste0("\ufdd2!{\"type\": \"failure\", \"language\": \"r\", \"name\": \"", esc(substr(name, 1, 200)),
                   "\", \"message\": \"", esc(substr(message, 1, 500)), "\", \"kind\": \"exception\"}\ufdd3\ufdd4"))
    })
    reset()
    invisible(NULL)
  }
  reset()
  options(error = as.call(list(hook)))
  # Cells have no network: an install would spend its time failing to reach a repository. Stop
  # it at once, by name, in utils as attached and in its namespace (utils is attached after this
  # profile runs).
  refuse <- function(what) function(...) stop(paste0(
    "no network in the sandbox; installs are disabled (console-bridge stopped ", what, "()). Use the ",
    "packages of R's library, or have the host install what is missing there"), call. = FALSE)
  stop_installs <- function(...) {
    for (name in c("install.packages", "update.packages")) try(silent = TRUE, {
      where <- list(asNamespace("utils"), as.environment("package:utils"))
      for (env in where) {
        unlockBinding(name, env)
        assign(name, refuse(name), envir = env)
        lockBinding(name, env)
      }
    })
  }
  setHook(packageEvent("utils", "attach"), stop_installs)
  if ("package:utils" %%in%% search()) stop_installs()
})
"""


def r_profile_text(nonce: str, user_profile: str | None = None) -> str:
    """The ``R_PROFILE_USER`` file: sources the user's own profile, then sets the outcome hook."""
    return _R_PROFILE % {"dir": json.dumps(outcome_dir_name(nonce)), "user": json.dumps(user_profile or "")}
