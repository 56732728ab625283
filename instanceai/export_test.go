package instanceai

// MaxDrainPass exposes maxDrainPass to the external tests.
const MaxDrainPass = maxDrainPass
