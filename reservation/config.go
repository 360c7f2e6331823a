package reservation

import "github.com/holdfast-db/holdfast/config"

// Config configures the engine: the settings under reservation in
// holdfast's configuration, documented, defaulted and validated in package
// config (config.Engine). Start from DefaultConfig; New fills in zero knobs
// (Config.WithDefaults) and validates.
type Config = config.Engine

// DefaultConfig returns the documented defaults (config.DefaultEngine).
func DefaultConfig() Config { return config.DefaultEngine() }
