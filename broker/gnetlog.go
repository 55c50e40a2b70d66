package broker

import "github.com/rs/zerolog"

// gnetLogger routes gnet's own log lines into the broker's zerolog logger.
type gnetLogger struct{ log zerolog.Logger }

func (l gnetLogger) Debugf(format string, args ...any) { l.log.Debug().Msgf("gnet: "+format, args...) }
func (l gnetLogger) Infof(format string, args ...any)  { l.log.Debug().Msgf("gnet: "+format, args...) }
func (l gnetLogger) Warnf(format string, args ...any)  { l.log.Warn().Msgf("gnet: "+format, args...) }
func (l gnetLogger) Errorf(format string, args ...any) { l.log.Error().Msgf("gnet: "+format, args...) }
func (l gnetLogger) Fatalf(format string, args ...any) { l.log.Fatal().Msgf("gnet: "+format, args...) }
