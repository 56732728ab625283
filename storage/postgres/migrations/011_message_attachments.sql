-- A user message keeps the files sent with it: a JSON array of n8n's
-- InstanceAiFileAttachment, '' for none (every message stored before).
ALTER TABLE messages ADD COLUMN attachments text NOT NULL DEFAULT '';
