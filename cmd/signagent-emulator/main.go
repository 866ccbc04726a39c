// Command signagent-emulator runs an emulator of the service (trusted,
// legacy, identity provider and business sides) on loopback, for tests,
// the demo and trying an integration. It is not in the Debian package:
// partners install signagent alone.
package main

import "github.com/signagent/signagent/cmd/internal/emulatorcmd"

func main() { emulatorcmd.Main() }
