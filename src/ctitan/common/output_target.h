#pragma once
// What a command may write over. Every writer of ctitan's commands writes to a temporary name and
// renames it into place, so the checks here are about the target itself: it is never one of the
// command's inputs (`data prepare --output` onto its own `--input` would read what it truncates),
// never a device or FIFO (the rename would replace /dev/full by a regular file), and an existing
// file is replaced only with --overwrite.
#include <filesystem>
#include <string>
#include <vector>

namespace ctitan {

// Whether `a` and `b` name the same existing file or directory (device and inode: another path,
// a symlink or a hard link counts).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// An InputError naming `flag` and `target` when `target` is one of `inputs`, exists as anything
// but a regular file, or exists and `overwrite` is false.
void check_output_file(const std::string& flag, const std::filesystem::path& target, bool overwrite,
                       const std::vector<std::filesystem::path>& inputs);

// Creates `folder` (and its parents) if needed and creates and removes a file in it, so that a
// folder a run will write into late (checkpoints at their interval, after hours) is found
// unwritable at start-up: an IoError naming `key`, the folder and the OS error. A probe file,
// not access(2), since root passes access(2) on files it could not write (a read-only mount
// excepted) and ACLs and quotas decide only when a file is made.
void check_writable_folder(const std::string& key, const std::filesystem::path& folder);

}  // namespace ctitan
