import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memoryui', '0020_lint_results'),
    ]

    operations = [
        migrations.CreateModel(
            name='EntryCheck',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('document', models.CharField(choices=[('memory_md', 'MEMORY.md'), ('memory_summary', 'memory_summary.md')], max_length=32)),
                ('key', models.CharField(max_length=600)),
                ('sha256', models.CharField(help_text='of the text checked', max_length=64)),
                ('risk', models.PositiveSmallIntegerField(default=0)),
                ('flags', models.JSONField(blank=True, default=list)),
                ('claims', models.JSONField(blank=True, default=list)),
                ('claim_count', models.PositiveIntegerField(default=0)),
                ('unsupported', models.PositiveIntegerField(default=0)),
                ('tool_only', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('proposal', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checks', to='memoryui.proposal')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('proposal', 'document', 'key', 'sha256'), name='entry_check_unique')],
            },
        ),
    ]
