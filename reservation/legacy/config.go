package legacy

import "github.com/holdfast-db/holdfast/config"

// Config is reservation.redis in holdfast's configuration: where the
// legacy Redis counter is, its key layout, the switch's seed and the
// loops' intervals. It is documented, defaulted and validated in package
// config (config.Redis); a Store and a Router take it with defaults filled
// in (Config.WithDefaults).
type Config = config.Redis
