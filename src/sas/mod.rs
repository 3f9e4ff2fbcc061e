//! Safety Asymmetry Score: ASR per channel, SAS per model and family with paired bootstrap CIs, group dSAS, channel
//! trust hierarchy and rank agreement. Work in progress (issue 8).
