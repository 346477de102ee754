package cli

import "github.com/spf13/cobra"

// completeSettings offers the values of serve's enumerated settings to
// shell completion.
func completeSettings(cmd *cobra.Command) {
	for name, values := range map[string][]string{
		"store":             {"memory", "redis"},
		"default-algorithm": {"token_bucket", "fixed_window", "sliding_window_counter", "sliding_window_log"},
		"response-headers":  {"none", "draft03", "xratelimit", "ietf"},
		"log-level":         {"debug", "info", "warn", "error"},
		"log-format":        {"text", "json"},
		"redis-type":        {"single", "sentinel", "cluster"},
		"failure-mode":      {"open", "closed", "local"},
	} {
		// Only fails for a flag that does not exist or is registered
		// twice, which TestCompletion would catch.
		_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	_ = cmd.MarkFlagDirname("config-dir")
	_ = cmd.MarkFlagFilename("settings", "yaml", "yml", "toml", "json")
}

// completeDir completes a command's one optional DIR argument with
// directories.
func completeDir(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveFilterDirs
}
