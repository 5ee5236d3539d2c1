"""Building blocks the plugin's tasks and criteria put around any fairseq model
(as fairseq keeps ``modules/`` apart from the models that use them)."""
